#include "parallel/stage_partition.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace gpt2 {

double block_cost(const ModelConfig& c, int T) {
  const double C = c.n_embd;
  return 24.0 * C * C + 4.0 * C * T;  // 4 GEMMs (12 C^2 weights, 2 flops each) + attention
}

double head_cost(const ModelConfig& c) { return 2.0 * c.n_embd * c.padded_vocab(); }

std::vector<int> partition_stages(const ModelConfig& c, int pp, int T,
                                  const std::vector<int>& explicit_layers) {
  if (!explicit_layers.empty()) return explicit_layers;
  const int L = c.n_layer;
  if (pp < 1 || pp > L) fail_input("parallel.pp", "must be between 1 and model.n_layer (", L, ")");
  const double b = block_cost(c, T), h = head_cost(c);
  auto cost = [&](int first, int end) { return (end - first) * b + (end == L ? h : 0.0); };
  // best[s][l]: smallest possible max cost when the first s stages hold blocks [0, l).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(pp + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(pp + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= pp; ++s)
    for (int l = s; l <= L; ++l)
      for (int k = s - 1; k < l; ++k) {
        const double v = std::max(best[s - 1][k], cost(k, l));
        if (v < best[s][l]) best[s][l] = v, cut[s][l] = k;
      }
  std::vector<int> layers(pp);
  for (int s = pp, l = L; s > 0; --s) {
    layers[s - 1] = l - cut[s][l];
    l = cut[s][l];
  }
  return layers;
}

}  // namespace gpt2
