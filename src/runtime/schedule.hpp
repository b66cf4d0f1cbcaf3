#pragma once
// A pipeline schedule is, for each stage, the ordered list of what that rank does in one step.
// Schedules are pure functions of (stages, microbatches, stage); each lives in modules/schedule and
// registers itself. Sends never block (they complete in the background); receives block until the
// message is there. A send and a receive with the same neighbour that a schedule wants to complete
// together are one paired action (Megatron's p2p names: send_forward_recv_backward is
// send_activation_recv_grad here), so the executor and the simulator need no look-ahead.
#include <functional>
#include <string>
#include <vector>

#include "runtime/registry.hpp"

namespace gpt2 {

enum class ActionKind {
  recv_activation, forward, send_activation, recv_grad, backward, send_grad,
  send_activation_recv_grad,  // activation of `mb` to the next stage, gradient of `recv_mb` from it
  send_grad_recv_activation,  // gradient of `mb` to the previous stage, activation of `recv_mb` from it
};

struct Action {
  ActionKind kind;
  int mb;           // the microbatch computed, sent or received (paired: the one sent)
  int recv_mb = -1;  // paired actions: the microbatch received
  bool operator==(const Action& o) const { return kind == o.kind && mb == o.mb && recv_mb == o.recv_mb; }
};

const char* action_name(ActionKind k);
bool is_compute(ActionKind k);

struct ScheduleShape {
  int stages = 1, microbatches = 1, stage = 0;
};

struct ScheduleEntry {
  std::string name, help;
  int order = 0;
  // The stage's whole action list (communication included: see with_communication).
  std::function<std::vector<Action>(const ScheduleShape&)> make;
};
using ScheduleRegistry = Registry<ScheduleEntry>;

// name: a registered schedule (parallel.schedule); InputError for an unknown name.
std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage);
// Forward passes only (evaluation): every microbatch flows through in order.
std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage);

// Adds the receives before and the sends after each compute action of `compute` (forwards and
// backwards of one stage, in order) that the stage's position requires. With pair_exchanges, a send
// directly followed by a receive from the same neighbour becomes one paired action (1F1B's steady
// state and its turn from forwards to backwards).
std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage,
                                       bool pair_exchanges = false);

}  // namespace gpt2
