#include "plugins/optimizer.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"

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

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorShard>& shards,
                                          size_t n, const OptimizerConfig& cfg, MatrixShards* matrices) {
  for (size_t i = 0; i < shards.size(); ++i)
    if (shards[i].run.end > n || (i && shards[i].run.begin < shards[i - 1].run.end))
      fail("make_optimizer: tensor ", shards[i].name, "'s run is out of order or past the buffer of ", n);
  return OptimizerRegistry::get(name, "train.optimizer").make(shards, n, cfg, matrices);
}

void zero_uncovered(const std::vector<TensorShard>& shards, Vec<float> grads) {
  auto zero = [&](size_t b, size_t e) {
    if (e > b) Kokkos::deep_copy(ExecSpace(), Vec<float>(grads.data() + b, e - b), 0.0f);
  };
  size_t at = 0;
  for (const TensorShard& t : shards) {
    zero(at, t.run.begin);
    at = t.run.end;
  }
  zero(at, grads.extent(0));
}

}  // namespace gpt2
