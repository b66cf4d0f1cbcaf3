#pragma once
// A pipeline schedule is, for each stage, the ordered list of what that rank does in one step.
// Schedules are pure functions of (stages, microbatches, stage); modules/schedule implements them.
// Sends never block (they complete in the background); receives block until the message is there.
#include <string>
#include <utility>
#include <vector>

namespace gpt2 {

enum class ActionKind { recv_activation, forward, send_activation, recv_grad, backward, send_grad };

struct Action {
  ActionKind kind;
  int mb;
  bool operator==(const Action& o) const { return kind == o.kind && mb == o.mb; }
};

const char* action_name(ActionKind k);

// name: naive | gpipe | 1f1b. InputError for an unknown name.
std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage);
// Forward passes only (evaluation): every microbatch flows through in order.
std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage);

// Adds the receives before and the sends after each compute action of `compute` (forwards and
// backwards of one stage, in order) that the stage's position requires.
std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage);

}  // namespace gpt2
