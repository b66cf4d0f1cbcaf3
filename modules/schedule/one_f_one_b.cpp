// 1f1b (PipeDream-flush): min(p-s-1, m) warm-up forwards, then one forward + one backward at a time,
// then the remaining backwards. At most p - s microbatches in flight on stage s; GPipe's bubble.
// In the steady state a stage sends an activation and receives a gradient from the same neighbour
// back to back, and the other way round: those are paired exchanges.
#include <algorithm>

#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> one_f_one_b(const ScheduleShape& sh) {
  return with_communication(one_f_one_b_order(sh.stages, sh.microbatches, sh.stage), sh.stages, sh.stage,
                            /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"1f1b", "one forward, one backward (PipeDream-flush): at most p - stage in flight, GPipe's bubble", 2,
                  one_f_one_b};
  e.max_in_flight = [](const ScheduleShape& s) { return std::min(s.stages - s.stage, s.microbatches); };
  return e;
}());
}  // namespace

}  // namespace gpt2
