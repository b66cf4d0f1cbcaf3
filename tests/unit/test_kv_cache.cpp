// Decoding with the KV cache against the uncached way (Stage::forward over the window for every
// token): the model's logits at every position in double, generated tokens in fp32.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/kv_decoder.hpp"
#include "test_util.hpp"
#include "train/sampler.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
ModelConfig decoding_model() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.vocab_size = 37, c.block_size = 24;
  return c;
}
}  // namespace

// The decoder's logits at each position -- a prompt at once, then token by token -- equal the
// Stage's forward over the sequence so far (the uncached way), in double.
TEST(KvCache, DecoderLogitsEqualTheStageForward) {
  const ModelConfig cfg = decoding_model();
  const ParamLayout layout(cfg);
  const int T = cfg.block_size;
  Stage<double> stage(StageLayout(layout, 0, cfg.n_layer), 1, T);
  stage.init_params(3);
  {
    auto p = to_host(stage.params);
    auto r = random_vector(p.size(), 4, 0.2);  // larger weights: every path carries signal
    for (size_t i = 0; i < p.size(); ++i) p[i] += r[i];
    Kokkos::deep_copy(stage.params, Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(p.data(), p.size()));
  }
  Rng rng(9);
  std::vector<int> seq(T);
  for (int& t : seq) t = int(rng.below(uint64_t(cfg.vocab_size)));
  auto a = stage.make_activations(1);
  Buffer<double> losses("losses", T);
  std::vector<int> zeros(T, 0);
  a.load(seq.data(), zeros.data());
  stage.forward(a, Vec<double>(losses.data(), T), false, 0);
  const auto full = to_host<double>(Vec<const double>(stage.logits(1).data(), size_t(T) * cfg.padded_vocab()));
  KvDecoder<double> dec(stage);
  ASSERT_EQ(dec.capacity(), T);
  const int prompt = 5;
  for (int len = prompt; len <= T; ++len) {
    const Vec<double> logits = len == prompt ? dec.append(seq.data(), prompt) : dec.append(&seq[size_t(len - 1)], 1);
    const auto got = to_host<double>(Vec<const double>(logits.data(), logits.extent(0)));
    ASSERT_EQ(got.size(), size_t(cfg.padded_vocab()));
    double worst = 0;
    for (int v = 0; v < cfg.vocab_size; ++v)
      worst = std::max(worst, std::abs(got[size_t(v)] - full[size_t(len - 1) * cfg.padded_vocab() + size_t(v)]));
    EXPECT_LT(worst, 1e-11) << "position " << len - 1;
  }
  EXPECT_EQ(dec.length(), T);
  EXPECT_THROW(dec.append(seq.data(), 1), std::runtime_error);  // full
  dec.reset();
  EXPECT_EQ(dec.length(), 0);
}

// Cached and uncached generation give the same tokens, greedy and sampled (temperature, top-k),
// past the end of the window (where the window slides and the cached way runs it again), and stop
// at the stop token the same way.
TEST(KvCache, CachedGenerationEqualsUncachedTokenForToken) {
  const ModelConfig cfg = decoding_model();
  const ParamLayout layout(cfg);
  Stage<float> stage(StageLayout(layout, 0, cfg.n_layer), 1, 16);
  stage.init_params(11);
  {  // larger weights: less uniform logits, so sampling and greedy decoding both have work to do
    auto p = to_host(stage.params);
    auto r = random_vector(p.size(), 12, 0.15);
    for (size_t i = 0; i < p.size(); ++i) p[i] += float(r[i]);
    Kokkos::deep_copy(stage.params, Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(p.data(), p.size()));
  }
  const std::vector<int> prompt = {3, 1, 4, 1, 5};
  for (const double temperature : {0.0, 0.9}) {
    SampleOptions o;
    o.tokens = 40;  // 45 tokens: the 16-token window slides
    o.temperature = temperature;
    o.top_k = temperature > 0 ? 8 : 0;
    Rng r1(5, 77), r2(5, 77);
    o.kv_cache = true;
    const std::vector<int> cached = generate(stage, prompt, o, r1);
    o.kv_cache = false;
    const std::vector<int> uncached = generate(stage, prompt, o, r2);
    ASSERT_EQ(cached.size(), 40u);
    EXPECT_EQ(cached, uncached) << "temperature " << temperature;
    // A stop token ends both at its first appearance.
    o.stop = cached[7];
    const size_t first = size_t(std::find(cached.begin(), cached.end(), o.stop) - cached.begin());
    Rng r3(5, 77), r4(5, 77);
    o.kv_cache = true;
    const std::vector<int> stopped = generate(stage, prompt, o, r3);
    o.kv_cache = false;
    EXPECT_EQ(stopped, generate(stage, prompt, o, r4));
    EXPECT_EQ(stopped, std::vector<int>(cached.begin(), cached.begin() + long(first)));
  }
}

// The past is not recomputed: a prompt of P tokens and N new ones run P + N - 1 rows through the
// model while the sequence fits the window (the uncached way: a whole window per token); once it
// slides, every step runs the window again (as the uncached way does).
TEST(KvCache, EachNewTokenRunsOneRow) {
  const ModelConfig cfg = decoding_model();
  const ParamLayout layout(cfg);
  Stage<float> stage(StageLayout(layout, 0, cfg.n_layer), 1, 16);
  stage.init_params(13);
  KvDecoder<float> decoder(stage);
  SampleOptions o;
  o.temperature = 0;
  o.tokens = 10;
  Rng rng(1, 2);
  ASSERT_EQ(generate(decoder, {1, 2, 3, 4, 5}, o, rng).size(), 10u);
  EXPECT_EQ(decoder.rows_run(), 5 + 9);
  // 5 + 14 = 19 tokens: 11 appended one by one fill the 16 positions, then the window slides for
  // the 12th and 13th new token's logits (the 14th needs none).
  o.tokens = 14;
  KvDecoder<float> sliding(stage);
  generate(sliding, {1, 2, 3, 4, 5}, o, rng);
  EXPECT_EQ(sliding.rows_run(), 5 + 11 + 2 * 16);
}

// One forward: decoding runs the Stage's own passes -- the embedding, every block and the head,
// once each per append, as the stage's probe sees them -- not a copy of them.
TEST(KvCache, DecodesThroughTheStageForward) {
  const ModelConfig cfg = decoding_model();
  const ParamLayout layout(cfg);
  std::vector<int> units;
  StageOptions<float> options;
  options.probe = [&](Pass pass, int unit, bool begin) {
    if (begin && pass == Pass::forward) units.push_back(unit);
  };
  Stage<float> stage(StageLayout(layout, 0, cfg.n_layer), 1, 16, options);
  stage.init_params(5);
  KvDecoder<float> decoder(stage);
  const int prompt[3] = {1, 2, 3};
  decoder.append(prompt, 3);
  decoder.append(prompt, 1);
  std::vector<int> want;
  for (int pass = 0; pass < 2; ++pass)
    for (int u = 0; u <= cfg.n_layer + 1; ++u) want.push_back(u);  // embedding, blocks, head
  EXPECT_EQ(units, want);
}
