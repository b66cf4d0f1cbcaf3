// naive: F0 B0 F1 B1 ...  stages never overlap; with one microbatch this is plain model
// parallelism (the whole batch flows through as one piece): bubble (p-1)/p.
#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> naive(const ScheduleShape& s) {
  std::vector<Action> compute;
  for (int i = 0; i < s.microbatches; ++i)
    compute.push_back({ActionKind::forward, i}), compute.push_back({ActionKind::backward, i});
  return with_communication(compute, s.stages, s.stage);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"naive", "model parallel: one microbatch at a time through all stages, bubble (p-1)/p", 0, naive};
  e.max_in_flight = [](const ScheduleShape&) { return 1; };
  return e;
}());
}  // namespace

}  // namespace gpt2
