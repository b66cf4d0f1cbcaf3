#include "modules/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace gpt2 {

double learning_rate(const LrSchedule& s, int step) {
  const int w = s.warmup_steps;
  if (w > 0 && step < w) return s.lr * double(step + 1) / w;
  if (s.kind == "cosine") {
    const int span = std::max(1, s.total_steps - w);
    const double progress = std::min(1.0, double(step - w) / span);
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
  }
  if (s.kind == "noam") return std::max(s.min_lr, s.lr * std::sqrt(double(std::max(w, 1)) / (step + 1)));
  return s.lr;
}

}  // namespace gpt2
