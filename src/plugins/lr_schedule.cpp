#include "plugins/lr_schedule.hpp"

namespace gpt2 {

double learning_rate(const LrSchedule& s, int step) {
  const int w = s.warmup_steps;
  if (w > 0 && step < w) return s.lr * double(step + 1) / w;
  return LrScheduleRegistry::get(s.kind, "train.schedule").after_warmup(s, step);
}

}  // namespace gpt2
