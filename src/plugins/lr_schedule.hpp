#pragma once
// The learning-rate schedule interface. Schedules live in modules/optim and register themselves
// (train.schedule).
#include <functional>
#include <string>

#include "plugins/registry.hpp"

namespace gpt2 {

// Learning rate at a (0-based) step. Every schedule starts with a linear warm-up over warmup_steps.
struct LrSchedule {
  std::string kind = "constant";
  double lr = 3e-4, min_lr = 0;
  int warmup_steps = 0, total_steps = 1;
};

struct LrScheduleEntry {
  std::string name, help;
  int order = 0;
  // The rate after warm-up (step >= warmup_steps).
  std::function<double(const LrSchedule&, int step)> after_warmup;
};
using LrScheduleRegistry = Registry<LrScheduleEntry>;

double learning_rate(const LrSchedule& s, int step);

}  // namespace gpt2
