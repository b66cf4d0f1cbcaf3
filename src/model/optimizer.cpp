#include "model/optimizer.hpp"

namespace gpt2 {

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorInfo>& tensors,
                                          size_t n, const OptimizerConfig& cfg) {
  return OptimizerRegistry::get(name, "train.optimizer").make(tensors, n, cfg);
}

DecaySpans::DecaySpans(const std::vector<TensorInfo>& tensors, size_t n) {
  for (const TensorInfo& t : tensors) {
    if (!spans.empty() && spans.back().decay == t.decay && spans.back().range.end == t.range.begin)
      spans.back().range.end = t.range.end;
    else
      spans.push_back({t.range, t.decay});
  }
  size_t at = 0;
  for (const Span& sp : spans) {
    if (sp.range.begin > at) gaps.push_back({at, sp.range.begin});
    at = sp.range.end;
  }
  if (at < n) gaps.push_back({at, n});
}

void DecaySpans::zero_gaps(Vec<float> grads) const {
  for (const Range& r : gaps) Kokkos::deep_copy(ExecSpace(), Vec<float>(grads.data() + r.begin, r.size()), 0.0f);
}

double learning_rate(const LrSchedule& s, int step) {
  const int w = s.warmup_steps;
  if (w > 0 && step < w) return s.lr * double(step + 1) / w;
  return LrScheduleRegistry::get(s.kind, "train.schedule").after_warmup(s, step);
}

}  // namespace gpt2
