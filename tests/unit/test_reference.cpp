// The model against an independent PyTorch GPT-2 (tests/reference/make_fixtures.py, float64):
// loss, every gradient, and a 10-step AdamW trajectory with clipping, in our fp32 model.
#include <cmath>
#include <cstdio>

#include "fixture.hpp"
#include "model/stage.hpp"
#include "model/shard_list.hpp"
#include "plugins/optimizer.hpp"
#include "tensor/adamw_update.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
const std::string kFixture = std::string(GPT2_SOURCE_DIR) + "/tests/fixtures/tiny_reference.bin";

struct Reference {
  std::map<std::string, FixtureTensor> t;
  ModelConfig cfg;
  int B = 0, T = 0;
  Reference() : t(read_fixture(kFixture)) {
    const auto& c = t.at("config").values;
    cfg.n_layer = int(c[0]), cfg.n_head = int(c[1]), cfg.n_embd = int(c[2]);
    cfg.vocab_size = int(c[3]), cfg.block_size = int(c[4]);
    B = int(c[5]), T = int(c[6]);
  }
  // prefix "" (weights), "grad." or "final.": the named tensors in our global flat layout.
  std::vector<double> flat(const ParamLayout& layout, const std::string& prefix) const {
    std::vector<double> out(layout.total(), 0.0);
    for (const TensorInfo& ti : layout.tensors()) {
      const auto& v = t.at(prefix + ti.name()).values;  // wte is unpadded (V, C): padded rows stay 0
      std::copy(v.begin(), v.end(), out.begin() + ti.range.begin);
    }
    return out;
  }
};

void set_tokens(Activations<float>& a, const std::vector<double>& tok, const std::vector<double>& tgt,
                size_t offset) {
  auto ht = Kokkos::create_mirror_view(a.tokens);
  auto hg = Kokkos::create_mirror_view(a.targets);
  for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(tok[offset + i]), hg(i) = int(tgt[offset + i]);
  a.load(ht.data(), hg.data());
}

// One forward + backward of the fixture's batch at `offset`; returns the mean loss.
double forward_backward(Stage<float>& stage, Activations<float>& a, const Reference& ref, const char* tokens,
                        const char* targets, size_t offset) {
  const int N = ref.B * ref.T;
  set_tokens(a, ref.t.at(tokens).values, ref.t.at(targets).values, offset);
  Buffer<float> losses("losses", N);
  stage.zero_grads();
  stage.forward(a, Vec<float>(losses.data(), N), true, 1.0f / N);
  stage.backward(a);
  double loss = 0;
  for (float l : to_host(losses)) loss += l;
  return loss / N;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want, Range r) {
  double num = 0, den = 0;
  for (size_t i = r.begin; i < r.end; ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
}  // namespace

TEST(PyTorchReference, LossAndEveryGradient) {
  Reference ref;
  const ParamLayout layout(ref.cfg);
  Stage<float> stage(StageLayout(layout, 0, ref.cfg.n_layer), ref.B, ref.T);
  const auto w = ref.flat(layout, "");
  Kokkos::deep_copy(stage.params, from_host(std::vector<float>(w.begin(), w.end())));
  auto a = stage.make_activations(ref.B);
  const double loss = forward_backward(stage, a, ref, "tokens", "targets", 0);
  const double want = ref.t.at("loss").values[0];
  EXPECT_NEAR(loss, want, 1e-5 * want);
  const auto grads = to_host(stage.grads);
  const auto g_ref = ref.flat(layout, "grad.");
  for (const TensorInfo& ti : layout.tensors())
    EXPECT_LT(rel_l2(grads, g_ref, ti.range), 1e-4) << ti.name();
}

TEST(PyTorchReference, AdamWTrajectoryWithClipping) {
  Reference ref;
  const ParamLayout layout(ref.cfg);
  const StageLayout sl(layout, 0, ref.cfg.n_layer);
  Stage<float> stage(sl, ref.B, ref.T);
  const auto w = ref.flat(layout, "");
  Kokkos::deep_copy(stage.params, from_host(std::vector<float>(w.begin(), w.end())));
  const auto& hp = ref.t.at("adamw").values;  // lr, beta1, beta2, eps, weight_decay, grad_clip
  OptimizerConfig oc;
  oc.beta1 = hp[1], oc.beta2 = hp[2], oc.eps = hp[3], oc.weight_decay = hp[4];
  const std::vector<TensorShard> shards = tensor_shards(sl.tensors());
  auto opt = make_optimizer("adamw", shards, sl.local_size(), oc);
  auto a = stage.make_activations(ref.B);
  const size_t N = size_t(ref.B) * ref.T;
  const auto& loss_ref = ref.t.at("traj.loss").values;
  const auto& norm_ref = ref.t.at("traj.grad_norm").values;
  int clipped = 0;
  Buffer<double> sumsq("sumsq", 1);
  for (size_t step = 0; step < loss_ref.size(); ++step) {
    const double loss = forward_backward(stage, a, ref, "traj.tokens", "traj.targets", step * N);
    // As the trainer does it: the squared norm stays in device memory and clipping reads it there.
    sum_of_squares<float>(Vec<float>(stage.grads.data(), stage.grads.extent(0)), DeviceScalar(sumsq.data()));
    const double norm = std::sqrt(to_host(sumsq)[0]);
    EXPECT_NEAR(loss, loss_ref[step], 1e-5 * loss_ref[step]) << "step " << step;
    EXPECT_NEAR(norm, norm_ref[step], 1e-4 * norm_ref[step]) << "step " << step;
    clipped += norm > hp[5];
    opt->step({shards, Vec<float>(stage.params.data(), stage.params.extent(0)),
               Vec<float>(stage.grads.data(), stage.grads.extent(0)), {}},
              {hp[0], GradScale::clip(sumsq.data(), hp[5]), false});
  }
  EXPECT_GT(clipped, 0) << "the fixture should exercise clipping";
  const auto p = to_host(stage.params);
  const auto p_ref = ref.flat(layout, "final.");
  const size_t C = ref.cfg.n_embd;
  for (const TensorInfo& ti : layout.tensors()) {
    if (ti.kind != Param::qkvb) {
      EXPECT_LT(rel_l2(p, p_ref, ti.range), 1e-4) << ti.name();
      continue;
    }
    // The key bias adds the same q.b_k to every score of a softmax row, so its exact gradient is
    // zero; Adam normalises the rounding noise (1e-18 in float64, 1e-9 in fp32) into full-size
    // steps of random sign. Compare the query and value biases only.
    const size_t b = ti.range.begin;
    EXPECT_LT(rel_l2(p, p_ref, {b, b + C}), 1e-4) << ti.name() << " (q)";
    EXPECT_LT(rel_l2(p, p_ref, {b + 2 * C, b + 3 * C}), 1e-4) << ti.name() << " (v)";
  }
}

// Our bf16 (train.precision = "bf16") against PyTorch's autocast(bf16) on the same weights and batch
// (tests/reference/make_autocast_fixture.py). The two round at different places -- autocast also
// rounds every matmul's OUTPUT to bf16 (the logits and the loss included: its loss is a bf16 number)
// and runs the attention products in bf16; ours keeps GEMM outputs, attention and the loss in fp32
// -- so they agree to bf16's precision, not bit for bit. bf16 keeps 8 significant bits (unit
// roundoff u = 2^-9 = 2e-3); a gradient passes through several roundings per layer (activation,
// weight and output gradient at each GEMM, forward and backward), and on this model both runs land
// 1e-2 to 4e-2 (5u to 20u) from the float64 gradients, so the two differ by up to their sum: the
// bound is 5e-2 per tensor (relative L2), 25u. The loss: autocast's is rounded to bf16 (an ulp at
// 4.2 is 2^-5, 7e-3 relative): 1e-2 relative. fp16 (u = 2^-12) against float64: 5e-3, 20u.
// That our runs really round (and are not fp32 passing a loose bound) is checked too: bf16 differs
// from float64 100x more than fp32 does, and 4x more than fp16 (3 bits fewer: 8x expected).
TEST(PyTorchReference, Bf16MatchesAutocast) {
  Reference ref;
  const auto autocast = read_fixture(std::string(GPT2_SOURCE_DIR) + "/tests/fixtures/tiny_bf16_autocast.bin");
  const ParamLayout layout(ref.cfg);
  const auto w = ref.flat(layout, "");
  const auto g64 = ref.flat(layout, "grad.");
  std::vector<double> g_auto(layout.total(), 0.0);
  for (const TensorInfo& ti : layout.tensors()) {
    const auto& v = autocast.at("grad." + ti.name()).values;
    std::copy(v.begin(), v.end(), g_auto.begin() + ti.range.begin);
  }
  std::map<Precision, std::vector<float>> grads;
  std::map<Precision, double> losses, off64;  // off64: worst relative difference from float64
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    StageOptions<float> so;
    so.precision = p;
    Stage<float> stage(StageLayout(layout, 0, ref.cfg.n_layer), ref.B, ref.T, so);
    Kokkos::deep_copy(stage.params, from_host(std::vector<float>(w.begin(), w.end())));
    auto a = stage.make_activations(ref.B);
    losses[p] = forward_backward(stage, a, ref, "tokens", "targets", 0);
    grads[p] = to_host(stage.grads);
    for (const TensorInfo& ti : layout.tensors()) off64[p] = std::max(off64[p], rel_l2(grads[p], g64, ti.range));
  }
  const double want = autocast.at("loss").values[0];
  EXPECT_NEAR(losses[Precision::bf16], want, 1e-2 * want);
  for (const TensorInfo& ti : layout.tensors()) {
    EXPECT_LT(rel_l2(grads[Precision::bf16], g_auto, ti.range), 5e-2) << ti.name();
    EXPECT_LT(rel_l2(grads[Precision::fp16], g64, ti.range), 5e-3) << ti.name();
  }
  std::printf("  worst gradient difference from float64: fp32 %.1e, fp16 %.1e, bf16 %.1e\n", off64[Precision::fp32],
              off64[Precision::fp16], off64[Precision::bf16]);
  EXPECT_GT(off64[Precision::bf16], 100 * off64[Precision::fp32]) << "the bf16 run should show bf16's rounding";
  EXPECT_GT(off64[Precision::bf16], 4 * off64[Precision::fp16]) << "fp16 should round finer than bf16";
}
