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

#include "core/registry.hpp"

namespace gpt2 {

enum class ActionKind {
  recv_activation, forward, send_activation, recv_grad, backward, send_grad,
  send_activation_recv_grad,  // activation of `mb` to the next stage, gradient of `recv_mb` from it
  send_grad_recv_activation,  // gradient of `mb` to the previous stage, activation of `recv_mb` from it
  backward_input,             // B: input gradients (then send_grad)
  backward_weight,            // W: weight gradients of a microbatch whose B is done
};

struct Action {
  ActionKind kind;
  int mb;            // the microbatch computed, sent or received (paired: the one sent)
  int recv_mb = -1;  // paired actions: the microbatch received
  int chunk = 0;     // the rank's chunk it concerns (paired: the sent one)
  int recv_chunk = 0;  // paired actions: the chunk the received message is for
  // A forward and a backward a schedule pairs (dualpipev: on a GPU one's computation overlaps the
  // other's communication) share a pair number > 0; the trace and the Gantt plot show it. Not part of
  // the order: equal actions may differ in it.
  int pair = 0;
  bool operator==(const Action& o) const {
    return kind == o.kind && mb == o.mb && recv_mb == o.recv_mb && chunk == o.chunk && recv_chunk == o.recv_chunk;
  }
};

const char* action_name(ActionKind k);
bool is_compute(ActionKind k);

// Which rank runs virtual stage k, and as which chunk.
//   loop: k = chunk * ranks + rank (Megatron's interleaving; one chunk: k = rank)
//   vee:  two chunks, rank r runs stage r and stage 2 ranks - 1 - r (the V of ZB-V: the first and
//         the last stage, with the embedding and the head, on rank 0)
struct Placement {
  enum class Kind { loop, vee };
  Kind kind = Kind::loop;
  int ranks = 1, chunks = 1;
  int stages() const { return ranks * chunks; }
  int stage(int rank, int chunk) const {
    return kind == Kind::loop ? chunk * ranks + rank : chunk == 0 ? rank : 2 * ranks - 1 - rank;
  }
  int rank_of(int stage) const {
    return kind == Kind::loop ? stage % ranks : stage < ranks ? stage : 2 * ranks - 1 - stage;
  }
  int chunk_of(int stage) const { return kind == Kind::loop ? stage / ranks : stage < ranks ? 0 : 1; }
};

// Relative durations of a chunk's passes, for schedules that order by time (zb-v's list schedule).
// Every rank must build its order from the same costs, so they come from the model's shape, never
// from a rank's own measurements. The defaults are a GPT-2 block's at T = C / 2 (pass_costs).
struct PassCosts {
  double forward = 1, backward_input = 1.08, backward_weight = 0.92;
};
// A block's FLOPs per token: forward 24 C^2 + 4 T C (the linears; q k^T and att v), input pass
// 24 C^2 + 8 T C, weight pass 24 C^2 -- relative to the forward.
PassCosts pass_costs(int n_embd, int seq_len);

struct ScheduleShape {
  int stages = 1, microbatches = 1, stage = 0;  // pipeline ranks, microbatches, this rank
  int chunks = 1;                              // chunks per rank
  PassCosts costs;
};

struct ScheduleEntry {
  std::string name, help;
  int order = 0;
  std::function<std::vector<Action>(const ScheduleShape&)> make;  // a rank's whole list
  Placement::Kind placement = Placement::Kind::loop;
  int chunks = 1;              // chunks per rank; 0: parallel.virtual_stages
  bool split_backward = false;  // B and W actions instead of whole backwards
  bool microbatches_multiple_of_stages = false;  // m % p == 0 required
  int min_microbatches_per_stage = 0;            // m >= this x p required (dualpipev: 2)
  // A schedule read from a file (parallel.schedule_file) runs the one shape it was written for.
  std::string file = {};
  int stages = 0, microbatches = 0;  // 0: any
  // The most microbatch-chunks the rank of `shape.stage` holds at once (activations saved for a
  // backward): the memory bound the proof of every list holds the schedule to. Unset: every
  // microbatch of every chunk (m x chunks).
  std::function<int(const ScheduleShape&)> max_in_flight = {};
};
// The schedule's bound for one rank (max_in_flight, or m x chunks).
int max_in_flight(const ScheduleEntry& e, const ScheduleShape& shape);
using ScheduleRegistry = Registry<ScheduleEntry>;

// The chunks per rank schedule `e` runs with parallel.virtual_stages = v, and its placement.
int schedule_chunks(const ScheduleEntry& e, int virtual_stages);
Placement schedule_placement(const ScheduleEntry& e, int ranks, int virtual_stages);

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
