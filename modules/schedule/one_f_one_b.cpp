// 1f1b (PipeDream-flush): min(p-s-1, m) warm-up forwards, then one forward + one backward at a time,
// then the remaining backwards. At most p - s microbatches in flight on stage s; GPipe's bubble.
// In the steady state a stage sends an activation and receives a gradient from the same neighbour
// back to back, and the other way round: those are paired exchanges.
#include <algorithm>

#include "runtime/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> one_f_one_b(const ScheduleShape& sh) {
  const int p = sh.stages, m = sh.microbatches, s = sh.stage;
  const int warmup = std::min(p - s - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back({ActionKind::forward, i});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({ActionKind::forward, warmup + i});
    out.push_back({ActionKind::backward, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({ActionKind::backward, i});
  return with_communication(out, p, s, /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add(
    {"1f1b", "one forward, one backward (PipeDream-flush): at most p - stage in flight, GPipe's bubble", 2,
     one_f_one_b});
}  // namespace

}  // namespace gpt2
