// gpipe: F0 .. Fm-1, then B0 .. Bm-1. At clock k stage j runs microbatch k - j (torchgpipe's clock
// cycles); holds all m microbatches' activations; bubble (p-1)/(m+p-1).
#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> gpipe(const ScheduleShape& s) {
  std::vector<Action> compute;
  for (int i = 0; i < s.microbatches; ++i) compute.push_back({ActionKind::forward, i});
  for (int i = 0; i < s.microbatches; ++i) compute.push_back({ActionKind::backward, i});
  return with_communication(compute, s.stages, s.stage);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"gpipe", "all forwards, then all backwards; holds m microbatches, bubble (p-1)/(m+p-1)", 1, gpipe};
  e.max_in_flight = [](const ScheduleShape& s) { return s.microbatches; };
  return e;
}());
}  // namespace

}  // namespace gpt2
