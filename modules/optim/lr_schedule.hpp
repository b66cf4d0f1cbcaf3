#pragma once
// Learning-rate schedules, all with an optional linear warm-up over the first warmup_steps:
//   constant: lr after warm-up
//   cosine:   from lr down to min_lr along a half cosine over the remaining steps
//   noam:     lr * sqrt(warmup / (step+1)) after warm-up (inverse square root), floored at min_lr
#include <string>

namespace gpt2 {

struct LrSchedule {
  std::string kind = "constant";
  double lr = 3e-4, min_lr = 0;
  int warmup_steps = 0, total_steps = 1;
};

// step is 0-based.
double learning_rate(const LrSchedule& s, int step);

}  // namespace gpt2
