#include "model/optimizer.hpp"

namespace gpt2 {

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorInfo>& tensors,
                                          size_t n, const OptimizerConfig& cfg) {
  return OptimizerRegistry::get(name, "train.optimizer").make(tensors, n, cfg);
}

double learning_rate(const LrSchedule& s, int step) {
  const int w = s.warmup_steps;
  if (w > 0 && step < w) return s.lr * double(step + 1) / w;
  return LrScheduleRegistry::get(s.kind, "train.schedule").after_warmup(s, step);
}

}  // namespace gpt2
