// Whole training steps (forward + backward + grad norm + AdamW) of a one-rank model, and each
// kernel's forward + backward at GPT-2 124M shapes. Reports ms, tokens/s and GFLOP/s.
//   bench_train_step --benchmark_filter=TrainStep
// Model flops per token for forward+backward: 6 * parameters + 12 * n_layer * n_embd * T (attention).
//
// A step of any shape, set from the environment (tests/bench/bench_gpu.py uses it on a GPU):
//   GPT2_BENCH_B=16 GPT2_BENCH_T=1024 [GPT2_BENCH_TF32=1] [GPT2_BENCH_PRECISION=fp32|bf16|fp16]
//   [GPT2_BENCH_MODEL=124M|small] [GPT2_BENCH_MIN_TIME=3] bench_train_step --benchmark_filter=TrainStepEnv
// registers TrainStepEnv_<model>_B<B>_T<T>_<fp32|tf32|bf16|fp16> (TF32: cuBLAS tensor-core GEMMs; bf16
// and fp16: train.precision's mixed precision, fp32 masters and the 16-bit working copy);
// GPT2_BENCH_ATTENTION=auto|fused|materialized picks model.attention (auto: the trainer's choice). With
// GPT2_BENCH_KERNEL_TABLE=FILE it also times GPT2_BENCH_PROFILE_STEPS (default 3) more steps operation
// by operation (bench/step_profile.hpp: every Kokkos kernel and library GEMM; on CUDA by events, with
// NVTX ranges of the same names) and writes FILE (JSON).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "core/rng.hpp"
#include "model/stage.hpp"
#include "parallel/param_store.hpp"
#include "runtime/environment.hpp"
#include "plugins/optimizer.hpp"
#include "runtime/serial_communicator.hpp"
#include "parallel/zero.hpp"
#include "step_profile.hpp"
#include "tensor/adamw_update.hpp"
#include "tensor/attention_choice.hpp"
#include "tensor/attention.hpp"
#include "tensor/flash_attention.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/gemm_lowp.hpp"
#if defined(GPT2_HAVE_ONEDNN)
#include <dnnl.hpp>

#include "tensor/gemm_dnnl.hpp"
#endif
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

// Asks for 4 KiB pages over b before its first touch, undoing for comparison what the host build's
// Kokkos does for a large buffer (cmake/patches/kokkos-3.4.01-host-huge-pages.patch).
template <class T>
void on_small_pages(const Buffer<T>& b) {
#if defined(__linux__) && defined(MADV_NOHUGEPAGE) && !defined(KOKKOS_ENABLE_CUDA)
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE)), at = reinterpret_cast<uintptr_t>(b.data());
  const uintptr_t begin = (at + page - 1) & ~(page - 1), end = (at + b.size() * sizeof(T)) & ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_NOHUGEPAGE);
#else
  (void)b;
#endif
}

Buffer<float> random_buffer(size_t n, uint64_t seed, float scale = 1.0f, bool small_pages = false) {
  Buffer<float> b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bench"), n);
  if (small_pages) on_small_pages(b);
  auto h = Kokkos::create_mirror_view(b);
  Rng r(seed);
  for (size_t i = 0; i < n; ++i) h(i) = float(scale * (r.uniform() * 2 - 1));
  Kokkos::deep_copy(b, h);
  return b;
}

// A 64 MiB pass, untimed by its callers, that pushes a product's operands out of the caches as the
// rest of a step does (none when made off).
struct CacheEvictor {
  explicit CacheEvictor(bool on = true) : buf(random_buffer(on ? size_t(16) << 20 : 0, 6)) {}
  bool on() const { return buf.extent(0) != 0; }
  Buffer<float> buf;
  void run() const {
    float* pe = buf.data();
    for_each_index("evict", int64_t(buf.extent(0)), KOKKOS_LAMBDA(int64_t i) { pe[i] = pe[i] * 0.5f + 1.0f; });
    Kokkos::fence();
  }
};

// GPT2_BENCH_ATTENTION (auto | fused | materialized): model.attention for the whole-step benchmarks.
bool g_fused_attention = false;
bool g_attention_set = false;

// precision: train.precision's; convert: 16-bit GEMMs through the converting path even with oneDNN.
// Tail::store: the trainer's one-rank path -- a ParamStore (ZeRO-0, a serial communicator) takes each
// unit's part of the gradient norm as its gradient completes in backward, AdamW leaves the gradients
// zeroed for the next step. Tail::separate: a zeroing pass, a norm pass and AdamW after backward,
// for comparison (zero_ms and norm_ms).
// copy: under bf16 / fp16 the store keeps the 16-bit working copy its AdamW writes (false: the
// weights are rounded at every GEMM, for comparison).
enum class Tail { store, separate };
void train_step(benchmark::State& state, const ModelConfig& cfg, int B, int T, Precision precision = Precision::fp32,
                bool convert = false, Tail tail = Tail::store, bool copy = true) {
  const ParamLayout layout(cfg);
  const StageLayout sl(layout, 0, cfg.n_layer);
  OptimizerConfig oc;
  oc.weight_decay = 0.1;
  SerialCommunicator dp;
  Tracer tracer;
  ParamStore store(sl, dp, zero_policy(0), sl.local_size(), "adamw", oc, tracer, DType::f32,
                   copy ? precision : Precision::fp32);
  store.init(1);
  StageOptions<float> so;
  so.precision = precision;
  so.store = &store;
  so.fused_attention = g_attention_set ? g_fused_attention : fused_attention_faster(T);
  gemm_lowp_force_convert(convert);
  Stage<float> stage(sl, B, T, so);
  auto a = stage.make_activations(B);
  auto ht = Kokkos::create_mirror_view(a.tokens);
  Rng r(2);
  for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(cfg.vocab_size));
  a.load(ht.data(), ht.data());
  const size_t N = size_t(B) * T;
  Buffer<float> losses("losses", N);
  Kokkos::View<double, MemSpace> sumsq("sumsq");
  const Vec<float> grads(store.grads(0), sl.local_size());  // ZeRO-0: the whole local layout
  // Phase times (fenced, so they add up to the step): where a step's time goes.
  double t_zero = 0, t_fwd = 0, t_bwd = 0, t_norm = 0, t_opt = 0;
  auto lap = [](double& acc, auto&& f) {
    Kokkos::Timer t;
    f();
    Kokkos::fence();
    acc += t.seconds();
  };
  auto step = [&](bool timed) {
    double none = 0;
    auto phase = [&](double& acc, auto&& f) { timed ? lap(acc, f) : f(); };
    phase(tail == Tail::separate ? t_zero : none, [&] {
      if (tail == Tail::separate) Kokkos::deep_copy(grads, 0.0f);
      store.begin_step(0, 1);
    });
    phase(t_fwd, [&] { stage.forward(a, Vec<float>(losses.data(), N), true, 1.0f / N); });
    phase(t_bwd, [&] {
      stage.backward(a);
      store.finish_gradients();
    });
    phase(t_norm, [&] {
      if (tail == Tail::store) store.grad_sum_of_squares(DeviceScalar(sumsq.data()));
      else sum_of_squares<float>(grads, DeviceScalar(sumsq.data()));
    });
    phase(t_opt, [&] { store.optimizer_step(1e-4, GradScale::clip(sumsq.data(), 1.0)); });
  };
  // Google Benchmark calls this function afresh for each batch of iterations: a new model whose first
  // step touches every page and makes the GEMM primitives. A run's steps after its first are timed.
  step(false);
  Kokkos::fence();
  for (auto _ : state) step(true);
  // Once per process, GPT2_BENCH_KERNEL_TABLE=FILE: GPT2_BENCH_PROFILE_STEPS (3) more steps, each
  // operation timed (bench/step_profile.hpp), into FILE.
  static bool profiled = false;
  const char* table = std::getenv("GPT2_BENCH_KERNEL_TABLE");
  if (table && *table && !profiled) {
    profiled = true;
    const char* ps = std::getenv("GPT2_BENCH_PROFILE_STEPS");
    const int steps = ps && std::atoi(ps) > 0 ? std::atoi(ps) : 3;
    auto untimed = [&] { step(false); };
    const std::string context = "\"n_layer\": " + std::to_string(cfg.n_layer) + ", \"n_embd\": " +
                                std::to_string(cfg.n_embd) + ", \"B\": " + std::to_string(B) + ", \"T\": " +
                                std::to_string(T) + ", \"attention\": \"" +
                                (so.fused_attention ? "fused" : "materialized") + "\", ";
    bench::profile_steps(table, steps, context, untimed);
  }
  const double it = double(state.iterations());
  state.counters["zero_ms"] = 1e3 * t_zero / it;
  state.counters["fwd_ms"] = 1e3 * t_fwd / it;  // includes the loss and LM-head backward
  state.counters["bwd_ms"] = 1e3 * t_bwd / it;  // Tail::store: includes the norm's unit parts
  state.counters["norm_ms"] = 1e3 * t_norm / it;
  state.counters["adamw_ms"] = 1e3 * t_opt / it;
  const double flops_per_token = 6.0 * double(layout.total()) + 12.0 * cfg.n_layer * cfg.n_embd * T;
  const double tokens = double(N) * state.iterations();
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(tokens * flops_per_token / 1e9, benchmark::Counter::kIsRate);
  state.counters["params_M"] = double(layout.total()) / 1e6;
  // Memory of this one-rank step: parameters, gradients and AdamW moments in fp32 whatever the
  // precision; saved activations of the microbatch; 16-bit copies of weights / gradients for GEMMs.
  const double MiB = 1024.0 * 1024.0;
  state.counters["param_grad_opt_MiB"] = 16.0 * double(layout.total()) / MiB;
  state.counters["act_MiB"] = double(a.bytes()) / MiB;
  state.counters["gemm16_scratch_MiB"] = double(stage.gemm16_scratch_bytes()) / MiB;
  gemm_lowp_force_convert(false);
}

void BM_TrainStep_124M_B4_T64(benchmark::State& s) { train_step(s, gpt2_124m(), 4, 64); }
void BM_TrainStep_124M_B4_T64_SeparateTail(benchmark::State& s) {
  train_step(s, gpt2_124m(), 4, 64, Precision::fp32, false, Tail::separate);
}
// train.precision = "bf16": the host's bf16 GEMMs (oneDNN when built with it), then the converting path.
void BM_TrainStep_124M_B4_T64_bf16(benchmark::State& s) { train_step(s, gpt2_124m(), 4, 64, Precision::bf16); }
void BM_TrainStep_124M_B4_T64_bf16_RoundPerGemm(benchmark::State& s) {
  train_step(s, gpt2_124m(), 4, 64, Precision::bf16, false, Tail::store, false);
}
void BM_TrainStep_124M_B4_T64_bf16_convert(benchmark::State& s) {
  train_step(s, gpt2_124m(), 4, 64, Precision::bf16, true);
}
void BM_TrainStep_Small_B8_T256(benchmark::State& s) { train_step(s, small(), 8, 256); }
BENCHMARK(BM_TrainStep_124M_B4_T64)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
// Every fp32 GEMM through OpenBLAS (the default sends the forward products x*w^T to oneDNN).
void BM_TrainStep_124M_B4_T64_OpenBLASOnly(benchmark::State& s) {
  gemm_set_host_f32(HostGemm::openblas);
  train_step(s, gpt2_124m(), 4, 64);
  gemm_set_host_f32(HostGemm::automatic);
}
BENCHMARK(BM_TrainStep_124M_B4_T64_OpenBLASOnly)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_124M_B4_T64_SeparateTail)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_124M_B4_T64_bf16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_124M_B4_T64_bf16_RoundPerGemm)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_124M_B4_T64_bf16_convert)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);
BENCHMARK(BM_TrainStep_Small_B8_T256)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

// ---- kernels at GPT-2 124M shapes (B=4, T=64: N=256 rows, C=768) ----------------------------
constexpr int kB = 4, kT = 64, kN = kB * kT, kC = 768, kH = 12, kVp = 50304, kV = 50257;

void report(benchmark::State& s, double flops) {
  s.counters["GFLOP/s"] = benchmark::Counter(flops * s.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// One fp32 GEMM at the LM head's shape (x w^T, through the library the step uses: oneDNN where built,
// OpenBLAS's sgemm otherwise): the rate that bounds a step from below.
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

// The LM head's three GEMMs as the step calls them (arg 0: logits = x w^T; 1: dx = dlogits w, the
// reduction over the vocabulary; 2: dw += dlogits^T x), through the automatic choice (arg 1 = 0) or
// OpenBLAS alone (1): the head is a sixth of the step's FLOPs and its shapes are the odd ones out.
void BM_Gemm_LMHead_Passes(benchmark::State& s) {
  auto x = random_buffer(size_t(kN) * kC, 1), w = random_buffer(size_t(kVp) * kC, 2);
  auto y = random_buffer(size_t(kN) * kVp, 3), dw = random_buffer(size_t(kVp) * kC, 4);
  const int pass = int(s.range(0));
  gemm_set_host_f32(s.range(1) ? HostGemm::openblas : HostGemm::automatic);
  s.SetLabel(pass == 0 ? "logits" : pass == 1 ? "dx" : "dw");
  for (auto _ : s) {
    if (pass == 0) gemm<float>(Op::N, Op::T, kN, kVp, kC, 1.0f, x.data(), kC, w.data(), kC, 0.0f, y.data(), kVp);
    if (pass == 1) gemm<float>(Op::N, Op::N, kN, kC, kVp, 1.0f, y.data(), kVp, w.data(), kC, 0.0f, x.data(), kC);
    if (pass == 2) gemm<float>(Op::T, Op::N, kVp, kC, kN, 1.0f, y.data(), kVp, x.data(), kC, 1.0f, dw.data(), kC);
    Kokkos::fence();
  }
  gemm_set_host_f32(HostGemm::automatic);
  report(s, 2.0 * kN * kVp * kC);
}
BENCHMARK(BM_Gemm_LMHead_Passes)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The same GEMM with bf16 inputs (fp32 accumulation): oneDNN's (arg 0) or the converting path (1).
void BM_GemmBf16_LMHead(benchmark::State& s) {
  Buffer<bf16> x("x16", size_t(kN) * kC), w("w16", size_t(kVp) * kC);
  auto y = random_buffer(size_t(kN) * kVp, 3);
  gemm_lowp_force_convert(s.range(0) == 1);
  s.SetLabel(gemm_lowp_backend(true));
  for (auto _ : s) {
    gemm_lowp<bf16>(Op::N, Op::T, kN, kVp, kC, 1.0f, x.data(), kC, w.data(), kC, 0.0f, y.data(), kVp);
    Kokkos::fence();
  }
  gemm_lowp_force_convert(false);
  report(s, 2.0 * kN * kVp * kC);
}
BENCHMARK(BM_GemmBf16_LMHead)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Every GEMM shape of a GPT-2 124M step (B 4, T 64), as the step calls it, through one library:
// arg 1 = 0 OpenBLAS sgemm, 1 oneDNN f32, 2 oneDNN bf16 (fp32 output), 3 oneDNN bf16 with a transposed
// A stored as op(A) (a weight gradient's dY^T copied out transposed), 4 fp32 through gemm<float> as
// the step calls it (its per-shape library, the LM head's input gradient in slices), 5 oneDNN bf16
// with a bias and a residual added inside the call (a forward product's epilogue; x*w^T shapes
// only), 6 oneDNN f32 with that epilogue, 7 oneDNN f32 with the bias alone, 8 oneDNN f32 storing a
// weight gradient (beta 0, as onto the zeroed gradient; dY^T*X shapes only). arg 2 = 1: before each
// call a 64 MiB pass pushes the operands out of the caches, as the rest of a step does (untimed).
// The step's GEMMs are 12 of each block shape and one of each head shape; this says which library
// wins each shape.
struct StepGemmShape {
  const char* name;
  Op a, b;
  int M, N, K;
  int per_step;
};
const StepGemmShape kStepGemms[] = {
    {"qkv x*w^T", Op::N, Op::T, kN, 3 * kC, kC, 12},     {"attproj x*w^T", Op::N, Op::T, kN, kC, kC, 12},
    {"fc x*w^T", Op::N, Op::T, kN, 4 * kC, kC, 12},      {"proj x*w^T", Op::N, Op::T, kN, kC, 4 * kC, 12},
    {"qkv dY*W", Op::N, Op::N, kN, kC, 3 * kC, 12},      {"attproj dY*W", Op::N, Op::N, kN, kC, kC, 12},
    {"fc dY*W", Op::N, Op::N, kN, kC, 4 * kC, 12},       {"proj dY*W", Op::N, Op::N, kN, 4 * kC, kC, 12},
    {"qkv dY^T*X", Op::T, Op::N, 3 * kC, kC, kN, 12},    {"attproj dY^T*X", Op::T, Op::N, kC, kC, kN, 12},
    {"fc dY^T*X", Op::T, Op::N, 4 * kC, kC, kN, 12},     {"proj dY^T*X", Op::T, Op::N, kC, 4 * kC, kN, 12},
    {"head x*w^T", Op::N, Op::T, kN, kVp, kC, 1},        {"head dY*W", Op::N, Op::N, kN, kC, kVp, 1},
    {"head dY^T*X", Op::T, Op::N, kVp, kC, kN, 1},
};
constexpr int kStepGemmCount = int(sizeof(kStepGemms) / sizeof(kStepGemms[0]));

void BM_StepGemm(benchmark::State& s) {
  const StepGemmShape& g = kStepGemms[s.range(0)];
  const int lib = int(s.range(1));
  const bool cold = s.range(2) == 1;
  const int lda = g.a == Op::N ? g.K : g.M, ldb = g.b == Op::N ? g.N : g.K;
  const size_t na = size_t(g.M) * g.K, nb = size_t(g.K) * g.N;
  auto a = random_buffer(na, 1), b = random_buffer(nb, 2), c = random_buffer(size_t(g.M) * g.N, 3);
  Buffer<bf16> a16("a16", na), b16("b16", nb);
  const float beta = g.a == Op::T ? 1.0f : 0.0f;  // weight gradients accumulate
  const char* libs[] = {" OpenBLAS",      " oneDNN-f32", " oneDNN-bf16", " oneDNN-bf16, A stored op(A)",
                        " fp32 as the step calls it", " oneDNN-bf16 + bias + residual",
                        " oneDNN-f32 + bias + residual", " oneDNN-f32 + bias", " oneDNN-f32 storing"};
  s.SetLabel(std::string(g.name) + libs[lib] + (cold ? ", cold" : ""));
  if (lib == 3 && g.a == Op::N) return s.SkipWithError("A is not transposed");
  if (lib >= 5 && lib <= 7 && g.b != Op::T) return s.SkipWithError("not a forward product");
  if (lib == 8 && g.a != Op::T) return s.SkipWithError("not a weight gradient");
  const size_t epi = lib >= 5 && lib <= 7 ? 1 : 0;  // the epilogue's operands, only where used
  auto bias = random_buffer(epi * g.N, 4), residual = random_buffer(epi * g.M * g.N, 5);
#if !defined(GPT2_HAVE_ONEDNN)
  if (lib > 0 && lib != 4) return s.SkipWithError("built without oneDNN");  // (4: gemm<float>)
#endif
  gemm_set_host_f32(lib == 4 ? HostGemm::automatic : HostGemm::openblas);
  const CacheEvictor evict(cold);
  for (auto _ : s) {
    if (evict.on()) {
      s.PauseTiming();
      evict.run();
      s.ResumeTiming();
    }
    if (lib == 0 || lib == 4) gemm<float>(g.a, g.b, g.M, g.N, g.K, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), g.N);
#if defined(GPT2_HAVE_ONEDNN)
    if (lib == 1 || lib == 8)
      dnnl_f32_gemm(g.a, g.b, g.M, g.N, g.K, 1.0f, a.data(), lda, b.data(), ldb, lib == 8 ? 0.0f : beta, c.data(), g.N);
    if (lib == 2) dnnl_bf16_gemm(g.a, g.b, g.M, g.N, g.K, 1.0f, a16.data(), lda, b16.data(), ldb, beta, c.data(), g.N);
    if (lib == 3) dnnl_bf16_gemm(Op::N, g.b, g.M, g.N, g.K, 1.0f, a16.data(), g.K, b16.data(), ldb, beta, c.data(), g.N);
    if (lib == 5)
      dnnl_bf16_gemm(g.a, g.b, g.M, g.N, g.K, 1.0f, a16.data(), lda, b16.data(), ldb, 0.0f, c.data(), g.N,
                     GemmEpilogue{bias.data(), residual.data()});
    if (lib == 6 || lib == 7)
      dnnl_f32_gemm(g.a, g.b, g.M, g.N, g.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), g.N,
                    GemmEpilogue{bias.data(), lib == 6 ? residual.data() : nullptr});
#endif
    Kokkos::fence();
  }
  gemm_set_host_f32(HostGemm::automatic);
  report(s, 2.0 * g.M * g.N * g.K);
  // The shape's share of a step in seconds (time per call x calls per step: an inverted rate).
  s.counters["s_of_step"] = benchmark::Counter(double(s.iterations()) / g.per_step,
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
// Registered in five families, each under Google Benchmark's 100 (larger ones warn): every library
// warm, the plain libraries cold, the fp32 epilogues (forward shapes 0-3) both ways, bf16's cold,
// fp32's stored weight gradients both ways.
const std::vector<int64_t> kAllStepGemms = benchmark::CreateDenseRange(0, kStepGemmCount - 1, 1);
BENCHMARK(BM_StepGemm)->ArgsProduct({kAllStepGemms, {0, 1, 2, 3, 4, 5}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepGemm)->ArgsProduct({kAllStepGemms, {0, 1, 2, 3, 4}, {1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepGemm)->ArgsProduct({{0, 1, 2, 3}, {6, 7}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepGemm)->ArgsProduct({{0, 1, 2, 3}, {5}, {1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepGemm)->ArgsProduct({{8, 9, 10, 11, 14}, {8}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

#if defined(GPT2_HAVE_ONEDNN)
// Packing reuse, fp32: a GEMM that reads weights (x*w^T or dY*W), with the weights in the blocked
// layout oneDNN picks for itself -- reordered once per optimizer update and reused by every call
// until the next -- against the row-major weights the step passes. arg 0: a kStepGemms shape that
// reads weights; arg 1: 0 row-major weights, 1 packed weights (the GEMM alone), 2 the reorder into
// the packed layout (one per weight and orientation per update). Measured, not kept: see the bench
// notebook.
void BM_PackedWeightsF32(benchmark::State& s) {
  const StepGemmShape& g = kStepGemms[s.range(0)];
  const int mode = int(s.range(1));
  if (g.a != Op::N) return s.SkipWithError("a weight gradient: no weights read");
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const int ldb = g.b == Op::N ? g.N : g.K;
  const dnnl::memory::desc a({g.M, g.K}, dt::f32, dims{g.K, 1});
  const dnnl::memory::desc rows({g.K, g.N}, dt::f32, g.b == Op::N ? dims{ldb, 1} : dims{1, ldb});
  const dnnl::memory::desc any({g.K, g.N}, dt::f32, dnnl::memory::format_tag::any);
  const dnnl::memory::desc c({g.M, g.N}, dt::f32, dims{g.N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, mode == 0 ? rows : any, c), eng);
  auto A = random_buffer(size_t(g.M) * g.K, 1), B = random_buffer(size_t(g.K) * g.N, 2),
       C = random_buffer(size_t(g.M) * g.N, 3);
  dnnl::memory ma(a, eng, A.data()), mb(rows, eng, B.data()), mc(c, eng, C.data());
  dnnl::memory packed(pd.weights_desc(), eng);
  dnnl::reorder pack(mb, packed);
  pack.execute(st, mb, packed);
  st.wait();
  const dnnl::matmul mm(pd);
  s.SetLabel(std::string(g.name) + (mode == 0 ? " row-major W" : mode == 1 ? " packed W" : " reorder W"));
  for (auto _ : s) {
    if (mode == 2) pack.execute(st, mb, packed);
    else mm.execute(st, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mode == 0 ? mb : packed}, {DNNL_ARG_DST, mc}});
    st.wait();
  }
  if (mode < 2) report(s, 2.0 * g.M * g.N * g.K);
  s.counters["s_of_step"] = benchmark::Counter(double(s.iterations()) / g.per_step,
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PackedWeightsF32)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 12, 13}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
#endif

// Call order, fp32: a Linear's two backward GEMMs -- dX = dY*W and dW += dY^T*X -- in either order,
// as the step calls them (gemm<float>, its per-shape library), after a 64 MiB pass has pushed the
// operands out of the caches as the rest of a step does. arg 0: the block's Linear (0 qkv, 1 attproj,
// 2 fc, 3 proj); arg 1: 0 dX first (the step's order), 1 dW first.
void BM_BackwardCallOrder(benchmark::State& s) {
  const int outs[] = {3 * kC, kC, 4 * kC, kC}, ins[] = {kC, kC, kC, 4 * kC};
  const int O = outs[s.range(0)], I = ins[s.range(0)];
  const bool dw_first = s.range(1) == 1;
  auto dy = random_buffer(size_t(kN) * O, 1), w = random_buffer(size_t(O) * I, 2), x = random_buffer(size_t(kN) * I, 3);
  auto dx = random_buffer(size_t(kN) * I, 4), dw = random_buffer(size_t(O) * I, 5);
  const CacheEvictor evict;
  s.SetLabel(std::string(s.range(0) == 0 ? "qkv" : s.range(0) == 1 ? "attproj" : s.range(0) == 2 ? "fc" : "proj") +
             (dw_first ? ", dW first" : ", dX first"));
  auto dX = [&] { gemm<float>(Op::N, Op::N, kN, I, O, 1.0f, dy.data(), O, w.data(), I, 0.0f, dx.data(), I); };
  auto dW = [&] { gemm<float>(Op::T, Op::N, O, I, kN, 1.0f, dy.data(), O, x.data(), I, 1.0f, dw.data(), I); };
  for (auto _ : s) {
    s.PauseTiming();
    evict.run();
    s.ResumeTiming();
    if (dw_first) dW(), dX();
    else dX(), dW();
    Kokkos::fence();
  }
  report(s, 4.0 * kN * O * I);
}
BENCHMARK(BM_BackwardCallOrder)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Embedding(benchmark::State& s) {
  auto wte = random_buffer(size_t(kVp) * kC, 1), wpe = random_buffer(size_t(1024) * kC, 2);
  auto dwte = random_buffer(size_t(kVp) * kC, 3), dwpe = random_buffer(size_t(1024) * kC, 4);
  auto out = random_buffer(size_t(kN) * kC, 5);
  auto tok = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("t", kN);
  std::vector<int> host(kN);
  Rng r(6);
  for (int& t : host) t = int(r.below(kV));
  Kokkos::deep_copy(tok, Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(host.data(), kN));
  TokenGroups groups;
  groups.allocate(kN);
  std::vector<int> staging(TokenGroups::table_size(kN));
  group_tokens(groups, host.data(), kN, staging.data());
  Buffer<float> parts("parts", size_t(TokenGroups::max_parts(kN)) * kC);
  for (auto _ : s) {
    embedding_forward<float>(Mat<float>(out.data(), kN, kC), tok, Mat<float>(wte.data(), kVp, kC),
                             Mat<float>(wpe.data(), 1024, kC), kT);
    embedding_backward<float>(Mat<float>(dwte.data(), kVp, kC), Mat<float>(dwpe.data(), 1024, kC),
                              Mat<float>(out.data(), kN, kC), groups, Mat<float>(parts.data(), groups.parts, kC), kT);
    Kokkos::fence();
  }
  // wte's backward: a work item per (chunk of a token's rows, column block); one a column block
  // walking every row before it was two-stage. At B 8, T 1024 with GPT-2's vocabulary the chunks
  // are about the rows' distinct tokens.
  const int blocks = (kC + kColumnBlock - 1) / kColumnBlock;
  s.counters["wte_backward_work_items"] = double(groups.chunks) * blocks;
  s.counters["wte_backward_work_items_one_pass"] = double(blocks);
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

// A bias gradient (a column sum over N rows) at GPT-2's widths: C and 4C. work_items: what one
// launch offers the device (column blocks x row blocks); one_per_column: the former one work item a
// column block walking every row.
void BM_BiasBackward(benchmark::State& s) {
  const int C = int(s.range(0));
  auto dout = random_buffer(size_t(kN) * C, 1), db = random_buffer(size_t(C), 2);
  for (auto _ : s) {
    bias_backward<float>(Vec<float>(db.data(), size_t(C)), CMat<float>(dout.data(), kN, C));
    Kokkos::fence();
  }
  s.counters["work_items"] = double(column_sum_work_items(kN, C));
  s.counters["work_items_T1024_B8"] = double(column_sum_work_items(8 * 1024, C));
  s.counters["one_per_column"] = double((C + kColumnSumWidth - 1) / kColumnSumWidth);
}
BENCHMARK(BM_BiasBackward)->Arg(kC)->Arg(4 * kC)->Unit(benchmark::kMicrosecond)->UseRealTime();

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

// Whole-sequence attention, forward and backward, 12 heads of 64. arg 0: 0 materialized (the T x T
// probabilities kept), 1 fused (tensor/flash_attention.hpp); arg 1: T, with B = 256 / T sequences
// (at least 1).
void BM_Attention(benchmark::State& s) {
  const bool fused = s.range(0) == 1;
  const int kT = int(s.range(1)), kB = std::max(1, 256 / kT), kN = kB * kT;
  auto qkv = random_buffer(kN * 3 * kC, 1), out = random_buffer(kN * kC, 2), dout = random_buffer(kN * kC, 3);
  auto att = random_buffer(fused ? 0 : kB * kH * kT * kT, 4), datt = random_buffer(fused ? 0 : kB * kH * kT * kT, 5);
  auto dqkv = random_buffer(kN * 3 * kC, 6), lse = random_buffer(kB * kH * kT, 7), D = random_buffer(kB * kH * kT, 8);
  const Mat<float> q(qkv.data(), kN, 3 * kC), y(out.data(), kN, kC), dy(dout.data(), kN, kC), dq(dqkv.data(), kN, 3 * kC);
  const int hs = kC / kH;
  const FlashProblem<float> p{q, q, kC, 2 * kC, AttnSpan::whole(kT), AttnSpan::whole(kT), DocStarts(), kB, kH, hs,
                              flash::tile_for<float>(hs, kT)};
  if (fused) reserve_flash_scratch<float>(hs, kT);
  for (auto _ : s) {
    if (fused) {
      flash_attention_forward<float>(p, y, Vec<float>(), Vec<float>(), lse, FlashPass{});
      flash_attention_row_dots<float>(D, dy, y, kT, kH);
      flash_attention_backward_dq<float>(p, dq, dy, lse, D, false);
      flash_attention_backward_dkv<float>(p, dq, dy, lse, D, false);
    } else {
      attention_forward<float>(y, Mat<float>(att.data(), kB * kH * kT, kT), q, kB, kT, kH);
      attention_backward<float>(dq, Mat<float>(datt.data(), kB * kH * kT, kT), dy, q,
                                Mat<float>(att.data(), kB * kH * kT, kT), kB, kT, kH);
    }
    Kokkos::fence();
  }
  report(s, 3.0 * 4.0 * kB * kT * kT * kC);  // 2 GEMMs forward, 4 backward, full T x T
  s.SetLabel(fused ? "fused" : "materialized");
}
BENCHMARK(BM_Attention)->ArgsProduct({{0, 1}, {64, 256, 512, 1024, 4096}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// One block of context parallelism's ring attention (the fused kernels), cp 2: rank 1's queries
// (chunks 1 and 2) against rank 0's block (chunks 0 and 3) -- two whole (L x L) tiles, of sequence 0:
// the facts behind a hardware file's kernel_overhead_us on the host. arg 0: 0 forward (scores and
// P v per tile: 1 launch), 1 backward (the query pass's scores, dP and dq, the key pass's scores, dP,
// dv and dk: 2 launches), 2 an empty Kokkos kernel. arg 1, the shape (heads, L = T / 2cp, head
// size): 0 the host model validation's (8, 32, 32: C 256, T 128, cp 2), 1 GPT-2 124M at T 1024, cp
// 2 (12, 256, 64). Counter us_per_launch: the block's time beyond its products at
// GPT2_BENCH_GEMM_GFLOPS (default 100 -- take BM_StepGemm's large ones), over its launches.
void BM_RingTile(benchmark::State& s) {
  const int part = int(s.range(0)), shape = int(s.range(1));
  const int nh = shape == 0 ? 8 : 12, L = shape == 0 ? 32 : 256, hs = shape == 0 ? 32 : 64, C = nh * hs;
  const size_t rows = size_t(2) * L, states = size_t(nh) * rows;
  auto qkv = random_buffer(rows * 3 * C, 1), kv = random_buffer(rows * 2 * C, 2), O = random_buffer(rows * C, 3);
  auto dqkv = random_buffer(rows * 3 * C, 4), dkv = random_buffer(rows * 2 * C, 5), dy = random_buffer(rows * C, 6);
  auto m = random_buffer(states, 7), l = random_buffer(states, 8), lse = random_buffer(states, 9);
  auto D = random_buffer(states, 10);
  const FlashProblem<float> p{Mat<float>(qkv.data(), rows, 3 * C), Mat<float>(kv.data(), rows, 2 * C), 0, C,
                              AttnSpan::ring(L, 2, 1), AttnSpan::ring(L, 2, 0), DocStarts(), 1, nh, hs,
                              flash::tile_for<float>(hs, L)};
  reserve_flash_scratch<float>(hs, L);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : s) {
    if (part == 0) {
      flash_attention_forward<float>(p, Mat<float>(O.data(), rows, C), m, l, lse, FlashPass{false, false});
    } else if (part == 1) {
      flash_attention_backward_dq<float>(p, Mat<float>(dqkv.data(), rows, 3 * C), Mat<float>(dy.data(), rows, C), lse,
                                         D, true);
      flash_attention_backward_dkv<float>(p, Mat<float>(dkv.data(), rows, 2 * C), Mat<float>(dy.data(), rows, C), lse,
                                          D, true);
    } else {
      Kokkos::parallel_for("empty", Kokkos::RangePolicy<ExecSpace>(0, 1), KOKKOS_LAMBDA(int64_t) {});
    }
    Kokkos::fence();
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const int products = part == 0 ? 2 * 2 : part == 1 ? 7 * 2 : 0, launches = part == 0 ? 1 : part == 1 ? 2 : 1;
  const double flops = products * 2.0 * nh * L * L * hs;
  report(s, flops);
  const char* rate = std::getenv("GPT2_BENCH_GEMM_GFLOPS");
  const double work_us = flops / ((rate ? std::atof(rate) : 100.0) * 1e3);
  s.counters["work_us"] = work_us;
  s.counters["us_per_launch"] = (us / std::max<double>(1, double(s.iterations())) - work_us) / launches;
  s.SetLabel(part == 0 ? "forward block" : part == 1 ? "backward block" : "empty kernel");
}
BENCHMARK(BM_RingTile)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();

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

// AdamW over 124M parameters. arg 0 = 1: it leaves the gradients 0 (as the step's update does,
// except where the next step's products store over them: parallel/grad_sink.hpp); arg 1 = 1: it
// writes the bf16 working copy. GB/s as the bytes it moves: 28 a value, +4 zeroing, +2 the copy.
// Values as a step has them, each zeroing pass reading fresh gradients (refilled untimed, then the
// caches evicted): over all-zero arrays the pass ran 0.93x the time (6 pairs, an EPYC box).
void adamw_124m(benchmark::State& s, bool zero, bool copy, bool small_pages = false) {
  const size_t n = ParamLayout(gpt2_124m()).total();
  Buffer<float> p = random_buffer(n, 11, 0.1f, small_pages), g = random_buffer(n, 12, 0.01f, small_pages);
  Buffer<float> m = random_buffer(n, 13, 1e-3f, small_pages), v = random_buffer(n, 14, 1e-3f, small_pages);
  Buffer<float> g0(Kokkos::view_alloc(Kokkos::WithoutInitializing, "g0"), zero ? n : 0);
  float* pv = v.data();
  for_each_index("square", int64_t(n), KOKKOS_LAMBDA(int64_t i) { pv[i] = pv[i] * pv[i]; });
  if (zero) Kokkos::deep_copy(g0, g);  // the gradients each zeroing pass starts from
  Buffer<uint16_t> bits(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bits"), copy ? n : 0);
  if (small_pages) on_small_pages(bits);
  Kokkos::deep_copy(bits, uint16_t(0));
  const CacheEvictor evict;
  AdamWStep st;
  st.lr = 1e-4, st.weight_decay = 0.1, st.zero_grads = zero;
  s.SetLabel(std::string(zero ? "zeroing the gradients" : "leaving the gradients") + (copy ? ", bf16 copy" : "") +
             (small_pages ? ", 4 KiB pages" : ""));
  for (auto _ : s) {
    if (zero) {
      s.PauseTiming();
      Kokkos::deep_copy(g, g0);
      evict.run();
      s.ResumeTiming();
    }
    adamw_update<float>(Vec<float>(p.data(), n), Vec<float>(g.data(), n), Vec<float>(m.data(), n),
                        Vec<float>(v.data(), n), st, WorkingCopy{Vec<uint16_t>(bits.data(), bits.extent(0))});
    Kokkos::fence();
  }
  const double bytes = 28.0 + (zero ? 4 : 0) + (copy ? 2 : 0);
  s.counters["GB/s"] = benchmark::Counter(bytes * double(n) * double(s.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
void BM_AdamW_124M(benchmark::State& s) { adamw_124m(s, s.range(0) == 1, s.range(1) == 1); }
BENCHMARK(BM_AdamW_124M)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
// The step's bf16 update (gradients left, the copy written) on the huge pages Kokkos' large buffers
// get (arg 1) or on 4 KiB pages (arg 0), in one run: what cmake/patches/kokkos-3.4.01-host-huge-pages.patch
// is worth where the system leaves huge pages to madvise.
void BM_AdamW_124M_Pages(benchmark::State& s) { adamw_124m(s, false, true, s.range(0) == 0); }
BENCHMARK(BM_AdamW_124M_Pages)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// STREAM's triad a = b + s*c over arrays far larger than the caches, on the Kokkos threads: the
// memory bandwidth a memory-bound pass (AdamW) can reach. Bytes as STREAM counts them: 12 per element.
void BM_Triad(benchmark::State& s) {
  const int64_t n = int64_t(32) << 20;  // 3 x 128 MiB
  auto b = random_buffer(size_t(n), 1), c = random_buffer(size_t(n), 2);
  Buffer<float> a("a", size_t(n));
  const float* pb = b.data();
  const float* pc = c.data();
  float* pa = a.data();
  for (auto _ : s) {
    for_each_index(
        "triad", n, KOKKOS_LAMBDA(int64_t i) { pa[i] = pb[i] + 3.0f * pc[i]; });
    Kokkos::fence();
  }
  s.counters["GB/s"] = benchmark::Counter(12.0 * double(n) * double(s.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Triad)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

// GPT2_BENCH_B / _T / _TF32 / _MODEL / _MIN_TIME: one whole-step benchmark of that shape (see the top).
int register_env_benchmark() {
  const char* eb = std::getenv("GPT2_BENCH_B");
  const char* et = std::getenv("GPT2_BENCH_T");
  if (!(eb && *eb) && !(et && *et)) return 0;
  const int B = eb && *eb ? std::atoi(eb) : 4, T = et && *et ? std::atoi(et) : 64;
  const char* etf = std::getenv("GPT2_BENCH_TF32");
  const bool tf32 = etf && *etf && std::string(etf) != "0";
  const char* ep = std::getenv("GPT2_BENCH_PRECISION");
  Precision precision = Precision::fp32;
  if (ep && *ep && !parse_word(ep, precision)) {
    std::fprintf(stderr, "bench_train_step: GPT2_BENCH_PRECISION must be fp32, bf16 or fp16, got '%s'\n", ep);
    return 2;
  }
  const char* em = std::getenv("GPT2_BENCH_MODEL");
  const std::string model = em && *em ? em : "124M";
  const char* ea = std::getenv("GPT2_BENCH_ATTENTION");
  const std::string attention = ea && *ea ? ea : "auto";
  if (attention != "auto" && attention != "fused" && attention != "materialized") {
    std::fprintf(stderr, "bench_train_step: GPT2_BENCH_ATTENTION must be auto, fused or materialized, got '%s'\n",
                 attention.c_str());
    return 2;
  }
  g_attention_set = attention != "auto";
  g_fused_attention = attention == "fused";
  const char* emt = std::getenv("GPT2_BENCH_MIN_TIME");
  const double min_time = emt && std::atof(emt) > 0 ? std::atof(emt) : 3.0;
  if (model != "124M" && model != "small") {
    std::fprintf(stderr, "bench_train_step: GPT2_BENCH_MODEL must be 124M or small, got '%s'\n", model.c_str());
    return 2;
  }
  const ModelConfig cfg = model == "124M" ? gpt2_124m() : small();
  if (B <= 0 || T <= 0 || T > cfg.block_size) {
    std::fprintf(stderr, "bench_train_step: GPT2_BENCH_B=%d / GPT2_BENCH_T=%d out of range (T <= %d)\n", B, T,
                 cfg.block_size);
    return 2;
  }
  const std::string name = "TrainStepEnv_" + model + "_B" + std::to_string(B) + "_T" + std::to_string(T) +
                           (precision != Precision::fp32 ? "_" + std::string(precision_name(precision))
                                                         : tf32 ? "_tf32" : "_fp32");
  benchmark::RegisterBenchmark(name.c_str(),
                               [cfg, B, T, tf32, precision](benchmark::State& s) {
                                 gemm_set_tf32(tf32);
                                 train_step(s, cfg, B, T, precision);
                                 gemm_set_tf32(false);
                               })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(min_time);
  benchmark::AddCustomContext("tf32", tf32 ? "on" : "off");
  benchmark::AddCustomContext("precision", precision_name(precision));
  benchmark::AddCustomContext("attention", attention);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Environment env;  // MPI + Kokkos; BLAS uses every core of the node for this one rank
  env.set_blas_threads(0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas_threads", std::to_string(env.set_blas_threads(0)));
  benchmark::AddCustomContext("execution_space", env.execution_space());
  if (register_env_benchmark() != 0) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
