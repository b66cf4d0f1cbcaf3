#pragma once
// A pipeline schedule is, for each pipeline rank, the ordered list of what that rank does in one
// step. Schedules are pure functions of (ranks, microbatches, rank[, chunks]); each lives in
// modules/schedule and registers itself. Sends never block (they complete in the background);
// receives block until the message is there. A send and a receive with the same neighbour that a
// schedule wants to complete together are one paired action (Megatron's p2p names:
// exchange_with_next is send_activation_recv_grad here), so the executor and the simulator
// need no look-ahead.
//
// Chunks: with interleaved and V schedules a rank runs several chunks of blocks (virtual stages).
// A Placement says which rank runs virtual stage k as which of its chunks; activations flow from
// virtual stage k to k + 1 and gradients back, a message to the same rank being a local hand-over.
// A backward may be whole, or split into B (input gradients, sent upstream at once) and W (weight
// gradients, free to fill bubbles: zero-bubble schedules).
#include <functional>
#include <string>
#include <vector>

#include "plugins/schedule_entry.hpp"

namespace gpt2 {

// A block's FLOPs per token: forward 24 C^2 + 4 T C (the linears; q k^T and att v), input pass
// 24 C^2 + 8 T C, weight pass 24 C^2 -- relative to the forward.
PassCosts pass_costs(int n_embd, int seq_len);

// name: a registered schedule (parallel.schedule); InputError for an unknown name.
std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage, int chunks = 1,
                                  const PassCosts& costs = {});
// (Every rank's list at once, runnable under NCCL's ordering: pipeline/schedule_lists.hpp.)
// Forward passes only (evaluation): every microbatch flows through every chunk in order.
std::vector<Action> forward_only_schedule(const Placement& placement, int microbatches, int rank);
std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage);

// 1F1B's compute order for stage s (PipeDream-flush): min(p-s-1, m) warm-up forwards, then one
// forward and one backward at a time, then the remaining backwards. A building block of schedules.
std::vector<Action> one_f_one_b_order(int stages, int microbatches, int stage);

// Megatron's interleaved 1F1B compute order for rank r of p with v chunks (round robin) and m
// microbatches (a multiple of p): microbatches in groups of p, the i-th forward chunk (i / p) % v of
// microbatch (i / (p v)) p + i % p, the backwards mirrored; 2 (p - r - 1) + (v - 1) p warm-up forwards.
std::vector<Action> interleaved_order(int p, int v, int m, int r);

// Adds the receives before and the sends after each compute action of `compute` (one rank's
// forwards, backwards and weight passes, in order) that its virtual stage requires. With
// pair_exchanges, a send directly followed by a receive from the same neighbouring rank becomes one
// paired action (1F1B's steady state and its turn from forwards to backwards).
std::vector<Action> with_communication(const std::vector<Action>& compute, const Placement& placement, int rank,
                                       bool pair_exchanges = false);
// The same pairing as a pass over a list that has its sends and receives.
std::vector<Action> pair_exchanges(const std::vector<Action>& actions, const Placement& placement, int rank);
// Reorders every rank's receives (all ranks' unpaired lists) so that each rank receives the messages
// of each other rank in the order that rank sends them, which NCCL needs (it has no tags). A
// receive may move earlier, never later: a message that was sent before one the rank waits for is
// available then too, so no deadlock can come of it.
void order_receives_as_sent(std::vector<std::vector<Action>>& ranks, const Placement& placement);
std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage,
                                       bool pair_exchanges = false);
// Every rank's whole list from every rank's compute order (schedules built for the whole pipeline at
// once: the V, a file): the messages added, receives ordered as sent, neighbour exchanges paired.
std::vector<std::vector<Action>> with_communication(const std::vector<std::vector<Action>>& compute,
                                                    const Placement& placement);

}  // namespace gpt2
