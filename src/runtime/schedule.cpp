#include "runtime/schedule.hpp"

#include "core/error.hpp"

namespace gpt2 {

const char* action_name(ActionKind k) {
  static const char* names[] = {"recv_activation", "forward",  "send_activation",          "recv_grad",
                                "backward",        "send_grad", "send_activation_recv_grad", "send_grad_recv_activation"};
  return names[int(k)];
}

bool is_compute(ActionKind k) { return k == ActionKind::forward || k == ActionKind::backward; }

std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage,
                                       bool pair_exchanges) {
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<Action> out;
  // A receive that directly follows a send to the same neighbour joins it.
  auto receive = [&](ActionKind recv, ActionKind after_send, ActionKind paired, int mb) {
    if (pair_exchanges && !out.empty() && out.back().kind == after_send) {
      out.back().kind = paired;
      out.back().recv_mb = mb;
    } else {
      out.push_back({recv, mb});
    }
  };
  for (const Action& a : compute) {
    if (a.kind == ActionKind::forward) {
      if (!first)
        receive(ActionKind::recv_activation, ActionKind::send_grad, ActionKind::send_grad_recv_activation, a.mb);
      out.push_back(a);
      if (!last) out.push_back({ActionKind::send_activation, a.mb});
    } else {
      if (!last)
        receive(ActionKind::recv_grad, ActionKind::send_activation, ActionKind::send_activation_recv_grad, a.mb);
      out.push_back(a);
      if (!first) out.push_back({ActionKind::send_grad, a.mb});
    }
  }
  return out;
}

std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage) {
  const ScheduleEntry& e = ScheduleRegistry::get(name, "parallel.schedule");
  if (stages <= 0 || microbatches <= 0 || stage < 0 || stage >= stages)
    fail("make_schedule: bad arguments (stages ", stages, ", microbatches ", microbatches, ", stage ", stage, ")");
  return e.make({stages, microbatches, stage});
}

std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage) {
  std::vector<Action> compute;
  for (int i = 0; i < microbatches; ++i) compute.push_back({ActionKind::forward, i});
  return with_communication(compute, stages, stage);
}

}  // namespace gpt2
