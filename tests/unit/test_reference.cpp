// The model against an independent PyTorch GPT-2 (tests/reference/make_fixtures.py, float64):
// loss, every gradient, and a 10-step AdamW trajectory with clipping, in our fp32 model.
#include <cmath>

#include "fixture.hpp"
#include "model/stage.hpp"
#include "runtime/optimizer.hpp"
#include "tensor/adamw.hpp"
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
  Kokkos::deep_copy(a.tokens, ht);
  Kokkos::deep_copy(a.targets, hg);
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
  auto opt = make_optimizer("adamw", sl.tensors(), sl.local_size(), oc);
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
    opt->step(Vec<float>(stage.params.data(), stage.params.extent(0)),
              Vec<float>(stage.grads.data(), stage.grads.extent(0)), hp[0], GradScale::clip(sumsq.data(), hp[5]), false);
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
