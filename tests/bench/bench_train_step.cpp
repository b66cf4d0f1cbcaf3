// Whole training steps (forward + backward + grad norm + AdamW) of a one-rank model, and each
// kernel's forward + backward at GPT-2 124M shapes. Reports ms, tokens/s and GFLOP/s.
//   bench_train_step --benchmark_filter=TrainStep
// Model flops per token for forward+backward: 6 * parameters + 12 * n_layer * n_embd * T (attention).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <cmath>

#include "core/rng.hpp"
#include "model/stage.hpp"
#include "runtime/environment.hpp"
#include "runtime/optimizer.hpp"
#include "tensor/adamw.hpp"
#include "tensor/attention.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"

using namespace gpt2;

namespace {

ModelConfig gpt2_124m() { return ModelConfig{}; }
ModelConfig small() {
  ModelConfig c;
  c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.vocab_size = 50257, c.block_size = 256;
  return c;
}

Buffer<float> random_buffer(size_t n, uint64_t seed, float scale = 1.0f) {
  Buffer<float> b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bench"), n);
  auto h = Kokkos::create_mirror_view(b);
  Rng r(seed);
  for (size_t i = 0; i < n; ++i) h(i) = float(scale * (r.uniform() * 2 - 1));
  Kokkos::deep_copy(b, h);
  return b;
}

void train_step(benchmark::State& state, const ModelConfig& cfg, int B, int T) {
  const ParamLayout layout(cfg);
  const StageLayout sl(layout, 0, cfg.n_layer);
  Stage<float> stage(sl, B, T);
  stage.init_params(1);
  OptimizerConfig oc;
  oc.weight_decay = 0.1;
  auto opt = make_optimizer("adamw", sl.tensors(), sl.local_size(), oc);
  auto a = stage.make_activations(B);
  auto ht = Kokkos::create_mirror_view(a.tokens);
  Rng r(2);
  for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(cfg.vocab_size));
  Kokkos::deep_copy(a.tokens, ht);
  Kokkos::deep_copy(a.targets, ht);
  const size_t N = size_t(B) * T;
  Buffer<float> losses("losses", N);
  const Vec<float> params(stage.params.data(), stage.params.extent(0));
  const Vec<float> grads(stage.grads.data(), stage.grads.extent(0));
  // Phase times (fenced, so they add up to the step): where a step's time goes.
  double t_zero = 0, t_fwd = 0, t_bwd = 0, t_norm = 0, t_opt = 0;
  auto lap = [](double& acc, auto&& f) {
    Kokkos::Timer t;
    f();
    Kokkos::fence();
    acc += t.seconds();
  };
  for (auto _ : state) {
    lap(t_zero, [&] { stage.zero_grads(); });
    lap(t_fwd, [&] { stage.forward(a, Vec<float>(losses.data(), N), true, 1.0f / N); });
    lap(t_bwd, [&] { stage.backward(a); });
    double norm = 0;
    lap(t_norm, [&] { norm = std::sqrt(sum_of_squares<float>(grads)); });
    lap(t_opt, [&] { opt->step(params, grads, 1e-4, clip_factor(norm, 1.0)); });
  }
  const double it = double(state.iterations());
  state.counters["zero_ms"] = 1e3 * t_zero / it;
  state.counters["fwd_ms"] = 1e3 * t_fwd / it;  // includes the loss and LM-head backward
  state.counters["bwd_ms"] = 1e3 * t_bwd / it;
  state.counters["norm_ms"] = 1e3 * t_norm / it;
  state.counters["adamw_ms"] = 1e3 * t_opt / it;
  const double flops_per_token = 6.0 * double(layout.total()) + 12.0 * cfg.n_layer * cfg.n_embd * T;
  const double tokens = double(N) * state.iterations();
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * flops_per_token / 1e9, benchmark::Counter::kIsRate);
  state.counters["params_M"] = double(layout.total()) / 1e6;
}

void BM_TrainStep_124M_B4_T64(benchmark::State& s) { train_step(s, gpt2_124m(), 4, 64); }
void BM_TrainStep_Small_B8_T256(benchmark::State& s) { train_step(s, small(), 8, 256); }
BENCHMARK(BM_TrainStep_124M_B4_T64)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_Small_B8_T256)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

// ---- kernels at GPT-2 124M shapes (B=4, T=64: N=256 rows, C=768) ----------------------------
constexpr int kB = 4, kT = 64, kN = kB * kT, kC = 768, kH = 12, kVp = 50304, kV = 50257;

void report(benchmark::State& s, double flops) {
  s.counters["GFLOP/s"] = benchmark::Counter(flops * s.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The BLAS alone at the LM head's shape: the rate that bounds a step from below.
void BM_Sgemm_LMHead(benchmark::State& s) {
  auto x = random_buffer(size_t(kN) * kC, 1), w = random_buffer(size_t(kVp) * kC, 2);
  auto y = random_buffer(size_t(kN) * kVp, 3);
  for (auto _ : s) {
    gemm<float>(Op::N, Op::T, kN, kVp, kC, 1.0f, x.data(), kC, w.data(), kC, 0.0f, y.data(), kVp);
    Kokkos::fence();
  }
  report(s, 2.0 * kN * kVp * kC);
}
BENCHMARK(BM_Sgemm_LMHead)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Embedding(benchmark::State& s) {
  auto wte = random_buffer(size_t(kVp) * kC, 1), wpe = random_buffer(size_t(1024) * kC, 2);
  auto dwte = random_buffer(size_t(kVp) * kC, 3), dwpe = random_buffer(size_t(1024) * kC, 4);
  auto out = random_buffer(size_t(kN) * kC, 5);
  auto tok = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("t", kN);
  for (auto _ : s) {
    embedding_forward<float>(Mat<float>(out.data(), kN, kC), tok, Mat<float>(wte.data(), kVp, kC),
                             Mat<float>(wpe.data(), 1024, kC), kT);
    embedding_backward<float>(Mat<float>(dwte.data(), kVp, kC), Mat<float>(dwpe.data(), 1024, kC),
                              Mat<float>(out.data(), kN, kC), tok, kT);
    Kokkos::fence();
  }
}
BENCHMARK(BM_Embedding)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNorm(benchmark::State& s) {
  auto in = random_buffer(kN * kC, 1), w = random_buffer(kC, 2), b = random_buffer(kC, 3);
  auto out = random_buffer(kN * kC, 4), dout = random_buffer(kN * kC, 5), din = random_buffer(kN * kC, 6);
  auto mean = random_buffer(kN, 7), rstd = random_buffer(kN, 8), dw = random_buffer(kC, 9), db = random_buffer(kC, 10);
  for (auto _ : s) {
    layernorm_forward<float>(Mat<float>(out.data(), kN, kC), Vec<float>(mean.data(), kN), Vec<float>(rstd.data(), kN),
                             Mat<float>(in.data(), kN, kC), Vec<float>(w.data(), kC), Vec<float>(b.data(), kC));
    layernorm_backward<float>(Mat<float>(din.data(), kN, kC), Vec<float>(dw.data(), kC), Vec<float>(db.data(), kC),
                              Mat<float>(dout.data(), kN, kC), Mat<float>(in.data(), kN, kC), Vec<float>(w.data(), kC),
                              Vec<float>(mean.data(), kN), Vec<float>(rstd.data(), kN));
    Kokkos::fence();
  }
  report(s, 20.0 * kN * kC);
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Matmul(benchmark::State& s) {  // the MLP up-projection: (N, C) x (4C, C)^T
  const int OC = 4 * kC;
  auto in = random_buffer(kN * kC, 1), w = random_buffer(OC * kC, 2), b = random_buffer(OC, 3);
  auto out = random_buffer(kN * OC, 4), dout = random_buffer(kN * OC, 5);
  auto din = random_buffer(kN * kC, 6), dw = random_buffer(OC * kC, 7), db = random_buffer(OC, 8);
  for (auto _ : s) {
    matmul_forward<float>(Mat<float>(out.data(), kN, OC), Mat<float>(in.data(), kN, kC), Mat<float>(w.data(), OC, kC),
                          Vec<float>(b.data(), OC));
    matmul_backward<float>(Mat<float>(din.data(), kN, kC), Mat<float>(dw.data(), OC, kC), Vec<float>(db.data(), OC),
                           Mat<float>(dout.data(), kN, OC), Mat<float>(in.data(), kN, kC), Mat<float>(w.data(), OC, kC));
    Kokkos::fence();
  }
  report(s, 6.0 * kN * kC * OC);
}
BENCHMARK(BM_Matmul)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Attention(benchmark::State& s) {
  auto qkv = random_buffer(kN * 3 * kC, 1), out = random_buffer(kN * kC, 2), dout = random_buffer(kN * kC, 3);
  auto att = random_buffer(kB * kH * kT * kT, 4), datt = random_buffer(kB * kH * kT * kT, 5);
  auto dqkv = random_buffer(kN * 3 * kC, 6);
  for (auto _ : s) {
    attention_forward<float>(Mat<float>(out.data(), kN, kC), Mat<float>(att.data(), kB * kH * kT, kT),
                             Mat<float>(qkv.data(), kN, 3 * kC), kB, kT, kH);
    attention_backward<float>(Mat<float>(dqkv.data(), kN, 3 * kC), Mat<float>(datt.data(), kB * kH * kT, kT),
                              Mat<float>(dout.data(), kN, kC), Mat<float>(qkv.data(), kN, 3 * kC),
                              Mat<float>(att.data(), kB * kH * kT, kT), kB, kT, kH);
    Kokkos::fence();
  }
  report(s, 3.0 * 4.0 * kB * kT * kT * kC);  // 2 GEMMs forward, 4 backward, full T x T
}
BENCHMARK(BM_Attention)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& s) {
  const size_t n = size_t(kN) * 4 * kC;
  auto in = random_buffer(n, 1), out = random_buffer(n, 2), d = random_buffer(n, 3);
  for (auto _ : s) {
    gelu_forward<float>(Vec<float>(out.data(), n), Vec<float>(in.data(), n));
    gelu_backward<float>(Vec<float>(d.data(), n), Vec<float>(in.data(), n));
    Kokkos::fence();
  }
  report(s, 30.0 * n);
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& s) {  // the LM head's softmax + loss at GPT-2's vocabulary
  auto logits = random_buffer(size_t(kN) * kVp, 1, 4.0f), losses = random_buffer(kN, 2), lse = random_buffer(kN, 3);
  auto tgt = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("t", kN);
  for (auto _ : s) {  // what training runs: loss and gradient in one kernel, in place
    crossentropy_fused<float>(Vec<float>(losses.data(), kN), Mat<float>(logits.data(), kN, kVp), tgt, kV,
                              1.0f / kN);
    Kokkos::fence();
  }
  report(s, 10.0 * kN * kV);
}
BENCHMARK(BM_CrossEntropy)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AdamW_124M(benchmark::State& s) {
  const size_t n = ParamLayout(gpt2_124m()).total();
  Buffer<float> p("p", n), g("g", n), m("m", n), v("v", n);
  AdamWStep st;
  st.lr = 1e-4, st.weight_decay = 0.1;
  for (auto _ : s) {
    adamw_update<float>(Vec<float>(p.data(), n), Vec<float>(g.data(), n), Vec<float>(m.data(), n),
                        Vec<float>(v.data(), n), st);
    Kokkos::fence();
  }
  s.counters["GB/s"] = benchmark::Counter(7.0 * 4 * n * s.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AdamW_124M)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  Environment env;  // MPI + Kokkos; BLAS uses every core of the node for this one rank
  env.set_blas_threads(0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas_threads", std::to_string(env.set_blas_threads(0)));
  benchmark::AddCustomContext("execution_space", env.execution_space());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
