// Whole-model checks in double: the gradient of the mean loss of a tiny GPT-2 against central
// differences, for one stage holding everything and for the model split into stages.
#include <algorithm>
#include <cmath>
#include <limits>

#include "model/stage.hpp"
#include "tensor/device_counters.hpp"
#include "tensor/device_work.hpp"
#include "tensor/crossentropy.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.vocab_size = 11, c.block_size = 6;
  return c;
}
template <class T>
void fill_tokens(Activations<T>& a, int V, uint64_t seed) {
  auto ht = Kokkos::create_mirror_view(a.tokens);
  auto hg = Kokkos::create_mirror_view(a.targets);
  Rng r(seed);
  for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(V)), hg(i) = int(r.below(V));
  a.load(ht.data(), hg.data());
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

// A translation pair's loss: targets outside the mask are negative (the loader's kMaskedTarget),
// the loss is the mean over the counted ones, and its gradient -- checked against central
// differences of that mean -- comes from the counted tokens only: the targets of the masked
// positions can be anything (here: changed to other tokens, then masked again) without changing
// the loss or any gradient bit.
TEST(ModelGradcheck, MaskedLossCoversTheCountedTargetsOnly) {
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int B = 2, T = 5, N = B * T;
  Stage<double> stage(StageLayout(layout, 0, cfg.n_layer), B, T);
  stage.init_params(42);
  {
    auto p = to_host(stage.params);
    auto r = random_vector(p.size(), 3, 0.3);
    for (size_t i = 0; i < p.size(); ++i) p[i] += r[i];
    Kokkos::deep_copy(stage.params, Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(p.data(), p.size()));
  }
  auto a = stage.make_activations(B);
  std::vector<int> tokens(N), targets(N);
  Rng r(8);
  for (int i = 0; i < N; ++i) tokens[size_t(i)] = int(r.below(cfg.vocab_size)), targets[size_t(i)] = int(r.below(cfg.vocab_size));
  const std::vector<bool> counted = {false, false, true, true, false, false, false, true, true, true};
  int n_counted = 0;
  std::vector<int> masked = targets;
  for (int i = 0; i < N; ++i)
    if (!counted[size_t(i)]) masked[size_t(i)] = -1;
    else ++n_counted;
  a.load(tokens.data(), masked.data());
  Buffer<double> losses("losses", N);
  auto mean_loss = [&] {
    stage.forward(a, Vec<double>(losses.data(), N), false, 0);
    double s = 0;
    for (double l : to_host(losses)) s += l;
    return s / n_counted;
  };
  // The mean over the counted targets is the unmasked run's per-token losses there, averaged.
  const double masked_mean = mean_loss();
  const auto masked_losses = to_host(losses);
  a.load(tokens.data(), targets.data());
  mean_loss();
  const auto all_losses = to_host(losses);
  double want = 0;
  for (int i = 0; i < N; ++i) {
    if (counted[size_t(i)]) want += all_losses[size_t(i)];
    else EXPECT_EQ(masked_losses[size_t(i)], 0.0) << "masked position " << i;
  }
  EXPECT_NEAR(masked_mean, want / n_counted, 1e-14);
  a.load(tokens.data(), masked.data());
  stage.zero_grads();
  stage.forward(a, Vec<double>(losses.data(), N), true, 1.0 / n_counted);
  stage.backward(a);
  const auto g = to_host(stage.grads);
  EXPECT_LE(gradcheck(stage.params, g, mean_loss, 1e-5, 1e-5, 1e-9, 3000), 1.0);
  // Other tokens as the masked positions' targets, masked again: the same bits.
  std::vector<int> other = masked;
  for (int i = 0; i < N; ++i)
    if (!counted[size_t(i)]) other[size_t(i)] = kIgnoreTarget - i;  // any negative value is outside the loss
  a.load(tokens.data(), other.data());
  stage.zero_grads();
  stage.forward(a, Vec<double>(losses.data(), N), true, 1.0 / n_counted);
  stage.backward(a);
  EXPECT_EQ(to_host(stage.grads), g);
}

// The backward split into its input pass (B) and weight pass (W), as zero-bubble schedules run it,
// gives exactly the gradients of the whole backward. With W deferred past the next microbatch's
// forward, only wte's additions come in another order (the LM head adds to it in the forward): the
// rest stays exact, wte within rounding.
template <class F>
void expect_split_backward_matches(bool defer_weight) {
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int B = 2, T = 5, N = B * T;  // T: tokens per sequence; F: the scalar
  Stage<F> whole(StageLayout(layout, 0, cfg.n_layer), B, T), split(StageLayout(layout, 0, cfg.n_layer), B, T);
  whole.init_params(7);
  Kokkos::deep_copy(split.params, whole.params);
  std::vector<Activations<F>> aw, as;
  for (int mb = 0; mb < 2; ++mb) {
    aw.push_back(whole.make_activations(B));
    as.push_back(split.make_activations(B, true));
    fill_tokens(aw.back(), cfg.vocab_size, 11 + mb);
    fill_tokens(as.back(), cfg.vocab_size, 11 + mb);
  }
  Buffer<F> losses("losses", N);
  whole.zero_grads(), split.zero_grads();
  std::vector<std::vector<F>> dinput_whole, dinput_split;
  for (int mb = 0; mb < 2; ++mb) {
    whole.forward(aw[mb], Vec<F>(losses.data(), N), true, F(1) / N);
    whole.backward(aw[mb]);
    dinput_whole.push_back(to_host<F>(Vec<const F>(whole.dres(B).data(), size_t(N) * cfg.n_embd)));
  }
  for (int mb = 0; mb < 2; ++mb) {
    split.forward(as[mb], Vec<F>(losses.data(), N), true, F(1) / N);
    split.backward_input(as[mb]);
    dinput_split.push_back(to_host<F>(Vec<const F>(split.dres(B).data(), size_t(N) * cfg.n_embd)));
    if (!defer_weight) split.backward_weight(as[mb]);
  }
  if (defer_weight)
    for (int mb = 0; mb < 2; ++mb) split.backward_weight(as[mb]);
  EXPECT_EQ(dinput_split, dinput_whole);
  const auto gw = to_host(whole.grads), gs = to_host(split.grads);
  ASSERT_EQ(gw.size(), gs.size());
  const Range wte = layout.tensor(Param::wte).range;
  // A reordered sum differs by a few roundings of its largest terms, not of its result (terms can
  // cancel): the bound scales with the largest wte gradient and the scalar's epsilon.
  F largest = 0;
  for (size_t i = wte.begin; i < wte.end; ++i) largest = std::max(largest, std::abs(gw[i]));
  const double reorder_tol = 16 * double(std::numeric_limits<F>::epsilon()) * double(largest);
  size_t differ = 0;
  for (size_t i = 0; i < gw.size(); ++i) {
    const bool reordered = defer_weight && i >= wte.begin && i < wte.end;
    if (reordered) EXPECT_NEAR(gs[i], gw[i], reorder_tol) << "wte element " << i;
    else differ += gw[i] != gs[i];
  }
  EXPECT_EQ(differ, 0u) << "of " << gw.size() << " gradients";
}

TEST(ModelGradcheck, SplitBackwardGivesTheSameGradients) {
  for (bool defer : {false, true}) {
    expect_split_backward_matches<double>(defer);
    expect_split_backward_matches<float>(defer);
  }
}

// Recomputation under a split backward, its weight passes deferred past the next microbatch's
// forward (which overwrites what recomputed blocks share): the gradients of a stage that keeps
// everything, and one recomputation per block and microbatch (in the input pass), in double.
TEST(ModelGradcheck, RecomputationUnderASplitBackwardRecomputesOnce) {
  using F = double;
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int B = 2, T = 5, N = B * T;
  Stage<F> keep(StageLayout(layout, 0, cfg.n_layer), B, T);
  keep.init_params(7);
  std::vector<F> want;
  {
    std::vector<Activations<F>> a;
    for (int mb = 0; mb < 2; ++mb) a.push_back(keep.make_activations(B)), fill_tokens(a.back(), cfg.vocab_size, 11 + mb);
    Buffer<F> losses("losses", N);
    keep.zero_grads();
    for (int mb = 0; mb < 2; ++mb) keep.forward(a[size_t(mb)], Vec<F>(losses.data(), N), true, F(1) / N), keep.backward(a[size_t(mb)]);
    want = to_host(keep.grads);
  }
  for (Recompute mode : {Recompute::selective, Recompute::full}) {
    int recomputations = 0;
    StageOptions<F> o;
    o.recompute = mode;
    o.on_recompute = [&](int, bool begin) { recomputations += begin; };
    Stage<F> st(StageLayout(layout, 0, cfg.n_layer), B, T, o);
    Kokkos::deep_copy(st.params, keep.params);
    std::vector<Activations<F>> a;
    for (int mb = 0; mb < 2; ++mb) a.push_back(st.make_activations(B, true)), fill_tokens(a.back(), cfg.vocab_size, 11 + mb);
    Buffer<F> losses("losses", N);
    st.zero_grads();
    for (int mb = 0; mb < 2; ++mb) st.forward(a[size_t(mb)], Vec<F>(losses.data(), N), true, F(1) / N), st.backward_input(a[size_t(mb)]);
    for (int mb = 0; mb < 2; ++mb) st.backward_weight(a[size_t(mb)]);
    EXPECT_EQ(recomputations, 2 * cfg.n_layer) << recompute_name(mode) << ": one per block and microbatch";
    const auto got = to_host(st.grads);
    F largest = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) largest = std::max(largest, std::abs(want[i])), worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LE(worst, 1e-12 * largest) << recompute_name(mode);
  }
}

namespace {
// One step of the tiny model (B 2, T 5, parameters from seed 7, tokens from seed 11) on a stage made
// with options o: the forward, and with need_grad the backward. Its losses into losses_out; returns
// its gradients.
template <class F>
std::vector<F> one_step(const StageOptions<F>& o, bool need_grad, std::vector<F>& losses_out) {
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int B = 2, T = 5, N = B * T;
  Stage<F> st(StageLayout(layout, 0, cfg.n_layer), B, T, o);
  st.init_params(7);
  Activations<F> a = st.make_activations(B);
  fill_tokens(a, cfg.vocab_size, 11);
  Buffer<F> losses("losses", N);
  st.zero_grads();
  st.forward(a, Vec<F>(losses.data(), N), need_grad, F(1) / N);
  if (need_grad) st.backward(a);
  losses_out = to_host(losses);
  return to_host(st.grads);
}

// The largest difference of b from a, relative to a's largest value (gradients) or absolute (losses).
template <class F>
double relative_difference(const std::vector<F>& a, const std::vector<F>& b) {
  double largest = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    largest = std::max(largest, double(std::abs(a[i]))), worst = std::max(worst, double(std::abs(b[i] - a[i])));
  return largest > 0 ? worst / largest : worst;
}
template <class F>
double absolute_difference(const std::vector<F>& a, const std::vector<F>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(b[i] - a[i])));
  return worst;
}
}  // namespace

// model.attention: the fused kernels give the materialised model's losses and gradients (double,
// 1e-12), with every block kept and with attention recomputed.
TEST(ModelGradcheck, FusedAttentionEqualsMaterializedAttention) {
  for (Recompute mode : {Recompute::none, Recompute::selective}) {
    StageOptions<double> o;
    o.recompute = mode;
    std::vector<double> lm, lf;
    const std::vector<double> gm = one_step(o, true, lm);
    o.fused_attention = true;
    const std::vector<double> gf = one_step(o, true, lf);
    EXPECT_LE(relative_difference(gm, gf), 1e-12) << recompute_name(mode);
    EXPECT_LE(absolute_difference(lm, lf), 1e-12) << recompute_name(mode);
  }
}

// train.loss_chunk_rows: the head's logits, loss and gradients a block of rows at a time (3 rows of
// 10, the last block 1) give the whole logits' losses and gradients -- double 1e-12; bf16 GEMM inputs
// (its 16-bit dlogits held a block at a time) 1e-5 -- and, without gradients, the same losses.
TEST(ModelGradcheck, HeadInRowBlocksEqualsTheWholeLogits) {
  auto check = [](auto zero, Precision precision, double tol) {
    using F = decltype(zero);
    for (bool need_grad : {true, false}) {
      StageOptions<F> o;
      o.precision = precision;
      std::vector<F> lw, lb;
      const std::vector<F> gw = one_step(o, need_grad, lw);
      o.loss_chunk_rows = 3;
      const std::vector<F> gb = one_step(o, need_grad, lb);
      EXPECT_LE(relative_difference(gw, gb), tol) << precision_name(precision) << (need_grad ? "" : " (no gradients)");
      EXPECT_LE(absolute_difference(lw, lb), tol) << precision_name(precision) << (need_grad ? "" : " (no gradients)");
    }
  };
  check(double(0), Precision::fp32, 1e-12);
  check(float(0), Precision::bf16, 1e-5);
}

// data.document_mask: a packed batch (sequence 0 documents of 2 and 4 tokens, sequence 1 of 3 and 3)
// gives each document's losses and, summed over them, gradients what each document run alone gives
// -- alone meaning a plain model (no document masks) on a sequence holding that document from
// position 0, the rest padding the loss skips. Double, 1e-12.
namespace {
struct Document {
  int sequence, begin, length;
};
template <class F>
std::vector<F> packed_or_alone(const std::vector<int>& tokens, const std::vector<int>& targets,
                               const std::vector<Document>& docs, int alone, std::vector<F>& losses_out) {
  const ModelConfig cfg = tiny();
  const ParamLayout layout(cfg);
  const int T = 6, B = alone < 0 ? 2 : 1, N = B * T;
  StageOptions<F> o;
  o.fused_attention = true;
  o.document_masks = alone < 0;
  Stage<F> st(StageLayout(layout, 0, cfg.n_layer), 2, T, o);
  st.init_params(7);
  Activations<F> a = st.make_activations(B);
  const size_t n = size_t(N);
  std::vector<int> tk(n), tg(n, -1), starts(n), pos(n);
  std::vector<int> staging(TokenGroups::table_size(N));
  for (size_t d = 0; d < docs.size(); ++d) {
    const Document& doc = docs[d];
    if (alone >= 0 && int(d) != alone) continue;
    for (int j = 0; j < doc.length; ++j) {
      const size_t from = size_t(doc.sequence * T + doc.begin + j), to = alone < 0 ? from : size_t(j);
      tk[to] = tokens[from], tg[to] = targets[from], starts[to] = alone < 0 ? doc.begin : 0, pos[to] = j;
    }
  }
  a.load(tk.data(), tg.data());
  if (alone < 0) a.load_documents(starts.data(), pos.data(), staging.data());
  Buffer<F> losses("losses", N);
  st.zero_grads();
  st.forward(a, Vec<F>(losses.data(), N), true, F(1));
  st.backward(a);
  losses_out = to_host(losses);
  return to_host(st.grads);
}
}  // namespace

TEST(ModelGradcheck, DocumentMaskedPackingEqualsDocumentsAlone) {
  const std::vector<Document> docs = {{0, 0, 2}, {0, 2, 4}, {1, 0, 3}, {1, 3, 3}};
  std::vector<int> tokens(12), targets(12);
  Rng r(5);
  for (int i = 0; i < 12; ++i) tokens[size_t(i)] = int(r.below(11)), targets[size_t(i)] = int(r.below(11));
  std::vector<double> packed_losses;
  const std::vector<double> packed = packed_or_alone<double>(tokens, targets, docs, -1, packed_losses);
  std::vector<double> sum(packed.size(), 0.0);
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<double> losses;
    const std::vector<double> g = packed_or_alone<double>(tokens, targets, docs, int(d), losses);
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    for (int j = 0; j < docs[d].length; ++j)
      EXPECT_NEAR(losses[size_t(j)], packed_losses[size_t(docs[d].sequence * 6 + docs[d].begin + j)], 1e-12)
          << "document " << d << " token " << j;
  }
  EXPECT_LE(relative_difference(sum, packed), 1e-12);
  // The masks matter: the same batch without them differs.
  std::vector<double> plain_losses;
  std::vector<Document> whole = {{0, 0, 6}, {1, 0, 6}};
  packed_or_alone<double>(tokens, targets, whole, 0, plain_losses);
  EXPECT_GT(std::abs(plain_losses[3] - packed_losses[3]), 1e-6);
}

namespace {
int device_operations = 0;  // what the device-work hook saw: every Kokkos kernel and copy, every GEMM call

// The device operations of one forward (need_grad: with the head's gradients) of a tiny model of
// `layers` blocks with fused attention, after a first forward (set-up work is not counted).
int forward_operations(int layers, DeviceCounters& counted) {
  ModelConfig cfg = tiny();
  cfg.n_layer = layers;
  const ParamLayout layout(cfg);
  StageOptions<float> o;
  o.fused_attention = true;
  Stage<float> st(StageLayout(layout, 0, layers), 2, 5, o);
  st.init_params(7);
  Activations<float> a = st.make_activations(2);
  fill_tokens(a, cfg.vocab_size, 11);
  Buffer<float> losses("losses", 10);
  st.forward(a, Vec<float>(losses.data(), 10), false, 0.1f);
  set_device_work_hook([] { ++device_operations; });
  device_operations = 0;
  const DeviceCounters before = device_counters();
  st.forward(a, Vec<float>(losses.data(), 10), false, 0.1f);
  counted = device_counters() - before;
  set_device_work_hook(nullptr);
  return device_operations;
}
}  // namespace

// What a GPU pays in launches for a transformer block's forward with fused attention: its Kokkos
// kernels, copies and library GEMMs (the difference of a 4-block and a 2-block model's forward, over
// 2), at most 12 -- 4 GEMMs, 2 LayerNorms, attention, GELU and the residual adds.
TEST(ModelGradcheck, ABlocksForwardIssuesAtMostTwelveDeviceOperations) {
  ASSERT_TRUE(install_device_counters());
  DeviceCounters two, four;
  const int per_block = (forward_operations(4, four) - forward_operations(2, two)) / 2;
  const int kernels = int(four.launches - two.launches) / 2;
  std::printf("a block's forward: %d device operations, %d of them Kokkos kernels\n", per_block, kernels);
  EXPECT_LE(per_block, 12);
  EXPECT_GE(kernels, 1) << "the counters saw no kernel";
}
