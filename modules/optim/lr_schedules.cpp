// Learning-rate schedules after the linear warm-up (train.schedule):
//   constant: lr
//   cosine:   from lr down to min_lr along a half cosine over the remaining steps
//   noam:     lr * sqrt(warmup / (step+1)) (inverse square root), floored at min_lr
#include <algorithm>
#include <cmath>

#include "plugins/lr_schedule.hpp"
#include "plugins/optimizer.hpp"

namespace gpt2 {

namespace {
double constant(const LrSchedule& s, int) { return s.lr; }

double cosine(const LrSchedule& s, int step) {
  const int w = s.warmup_steps, span = std::max(1, s.total_steps - w);
  const double progress = std::min(1.0, double(step - w) / span);
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double noam(const LrSchedule& s, int step) {
  return std::max(s.min_lr, s.lr * std::sqrt(double(std::max(s.warmup_steps, 1)) / (step + 1)));
}

[[maybe_unused]] const bool registered =
    LrScheduleRegistry::add({"constant", "train.lr throughout", 0, constant}) &&
    LrScheduleRegistry::add({"cosine", "half cosine from train.lr down to train.min_lr", 1, cosine}) &&
    LrScheduleRegistry::add({"noam", "inverse square root after warm-up, floored at train.min_lr", 2, noam});
}  // namespace

}  // namespace gpt2
