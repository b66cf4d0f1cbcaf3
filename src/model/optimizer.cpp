#include "model/optimizer.hpp"

#include <algorithm>
#include <numeric>

namespace gpt2 {

double newton_schulz_flops(double rows, double cols, int steps) {
  const double m = std::min(rows, cols), n = std::max(rows, cols);
  return steps * (4 * m * m * n + 2 * m * m * m);  // X X^T (or X^T X), A A, B X (or X B)
}

std::vector<int> deal_by_cost(const std::vector<double>& cost, int ranks) {
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(size_t(std::max(ranks, 1)), 0.0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t i : order) {
    const size_t q = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = int(q);
    load[q] += cost[i];
  }
  return owner;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorInfo>& tensors,
                                          size_t n, const OptimizerConfig& cfg, MatrixShards* matrices) {
  return OptimizerRegistry::get(name, "train.optimizer").make(tensors, n, cfg, matrices);
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
