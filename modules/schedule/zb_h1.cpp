// zb-h1 (zero bubble, Qi et al. 2023, "ZB-H1"): 1F1B with every backward split into B (input
// gradients, sent upstream at once) and W (weight gradients). The warm-up is 1F1B's; stage s keeps
// up to s weight passes pending and runs them in the cool-down, where 1F1B waits for gradients: the
// bubble shrinks to about a third of 1F1B's (F = B = W) while no stage holds more microbatches than
// 1F1B's first stage (p).
#include <algorithm>
#include <deque>

#include "runtime/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> zb_h1(const ScheduleShape& sh) {
  const int p = sh.stages, m = sh.microbatches, s = sh.stage;
  const int warmup = std::min(p - s - 1, m);
  std::vector<Action> compute;
  std::deque<int> pending;  // weight passes not run yet, oldest first
  auto B = [&](int i) {
    compute.push_back({ActionKind::backward_input, i});
    pending.push_back(i);
  };
  auto W = [&]() {
    compute.push_back({ActionKind::backward_weight, pending.front()});
    pending.pop_front();
  };
  for (int i = 0; i < warmup; ++i) compute.push_back({ActionKind::forward, i});
  for (int j = 0; j < m - warmup; ++j) {
    compute.push_back({ActionKind::forward, warmup + j});
    B(j);
    if (int(pending.size()) > s) W();
  }
  for (int j = m - warmup; j < m; ++j) {
    B(j);
    if (int(pending.size()) > s) W();
  }
  while (!pending.empty()) W();
  return with_communication(compute, p, s, /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add(
    {"zb-h1", "zero bubble H1: 1F1B with the backward split, weight passes deferred into the cool-down", 4, zb_h1,
     Placement::Kind::loop, /*chunks=*/1, /*split_backward=*/true});
}  // namespace

}  // namespace gpt2
