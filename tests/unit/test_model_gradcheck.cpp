// Whole-model checks in double: the gradient of the mean loss of a tiny GPT-2 against central
// differences, for one stage holding everything and for the model split into stages.
#include "model/stage.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.vocab_size = 11, c.block_size = 6;
  return c;
}
void fill_tokens(Activations<double>& a, int V, uint64_t seed) {
  auto ht = Kokkos::create_mirror_view(a.tokens);
  auto hg = Kokkos::create_mirror_view(a.targets);
  Rng r(seed);
  for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(V)), hg(i) = int(r.below(V));
  Kokkos::deep_copy(a.tokens, ht);
  Kokkos::deep_copy(a.targets, hg);
}
}  // namespace

TEST(ModelGradcheck, WholeTinyModel) {
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int B = 2, T = 5, N = B * T;
  Stage<double> stage(StageLayout(layout, 0, cfg.n_layer), B, T);
  stage.init_params(42);
  // Larger weights than GPT-2's init so every path carries signal the check can see.
  {
    auto p = to_host(stage.params);
    auto r = random_vector(p.size(), 3, 0.3);
    for (size_t i = 0; i < p.size(); ++i) p[i] += r[i];
    Kokkos::deep_copy(stage.params, Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(p.data(), p.size()));
  }
  auto a = stage.make_activations(B);
  fill_tokens(a, cfg.vocab_size, 7);
  Buffer<double> losses("losses", N);
  auto mean_loss = [&] {
    stage.forward(a, Vec<double>(losses.data(), N), false, 0);
    double s = 0;
    for (double l : to_host(losses)) s += l;
    return s / N;
  };
  stage.zero_grads();
  stage.forward(a, Vec<double>(losses.data(), N), true, 1.0 / N);
  // Each unit's gradient is handed over once, in backward, from the end of the buffer to 0.
  std::vector<size_t> ready;
  stage.on_grads_done([&](int u, bool in_forward) {
    if (!in_forward) ready.push_back(stage.layout().units()[size_t(u)].range.begin);
  });
  stage.backward(a);
  ASSERT_EQ(ready.size(), stage.layout().units().size());
  for (size_t i = 1; i < ready.size(); ++i) EXPECT_LT(ready[i], ready[i - 1]);
  EXPECT_EQ(ready.back(), 0u);
  // the padded part of wte gets no gradient
  auto g = to_host(stage.grads);
  for (size_t i = size_t(cfg.vocab_size) * cfg.n_embd; i < size_t(cfg.padded_vocab()) * cfg.n_embd; ++i)
    ASSERT_EQ(g[i], 0.0);
  EXPECT_LE(gradcheck(stage.params, g, mean_loss, 1e-5, 1e-5, 1e-9, 3000), 1.0);
}
