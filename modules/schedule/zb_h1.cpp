// zb-h1 (zero bubble, Qi et al. 2023, "ZB-H1"): 1F1B with every backward split into B (input
// gradients, sent upstream at once) and W (weight gradients). The warm-up is 1F1B's; stage s keeps
// up to s weight passes pending and runs them in the cool-down, where 1F1B waits for gradients: the
// bubble shrinks to about a third of 1F1B's (F = B = W) while no stage holds more microbatches than
// 1F1B's first stage (p).
#include <algorithm>
#include <deque>

#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
// 1F1B's order with each backward split: B in its place, its W deferred while stage s holds no more
// than s pending (the oldest goes first), the rest at the end.
std::vector<Action> zb_h1(const ScheduleShape& sh) {
  const int s = sh.stage;
  std::vector<Action> compute;
  std::deque<int> pending;  // weight passes not run yet, oldest first
  for (const Action& a : one_f_one_b_order(sh.stages, sh.microbatches, s)) {
    if (a.kind == ActionKind::forward) {
      compute.push_back(a);
      continue;
    }
    compute.push_back({ActionKind::backward_input, a.mb});
    pending.push_back(a.mb);
    if (int(pending.size()) > s) {
      compute.push_back({ActionKind::backward_weight, pending.front()});
      pending.pop_front();
    }
  }
  for (int mb : pending) compute.push_back({ActionKind::backward_weight, mb});
  return with_communication(compute, sh.stages, s, /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"zb-h1", "zero bubble H1: 1F1B with the backward split, weight passes deferred into the cool-down", 4,
                  zb_h1, Placement::Kind::loop, /*chunks=*/1, /*split_backward=*/true};
  e.max_in_flight = [](const ScheduleShape& s) { return std::min(s.stages, s.microbatches); };  // 1F1B's first stage
  return e;
}());
}  // namespace

}  // namespace gpt2
