// Mixed precision's pieces (named Kernels.* so the thread-count runs include them): the 16-bit
// types' rounding, the 16-bit GEMMs (oneDNN and the converting path) against double products of
// the rounded inputs, kernels writing 16-bit outputs, and Linear rounding every GEMM input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "model/linear.hpp"
#include "tensor/convert.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/gelu.hpp"
#include "tensor/gemm.hpp"
#include "tensor/gemm_lowp.hpp"
#include "tensor/layernorm.hpp"
#include "train/loss_scale.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
float bf(float x) { return float(bf16(x)); }
float hf(float x) { return float(fp16(x)); }

// Rounds host values through L.
template <class L>
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float(L(v[i]));
  return out;
}
std::vector<float> random_floats(size_t n, uint64_t seed) {
  const std::vector<double> d = random_vector(n, seed);
  return std::vector<float>(d.begin(), d.end());
}

// C (M,N) = alpha op(A) op(B) + beta C in double, row-major with tight leading dimensions.
std::vector<double> reference_gemm(Op oa, Op ob, int M, int N, int K, double alpha, const std::vector<float>& A,
                                   const std::vector<float>& B, double beta, const std::vector<float>& C) {
  std::vector<double> out(size_t(M) * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(oa == Op::N ? A[size_t(i) * K + k] : A[size_t(k) * M + i]) *
             double(ob == Op::N ? B[size_t(k) * N + j] : B[size_t(j) * K + k]);
      out[size_t(i) * N + j] = alpha * s + beta * C[size_t(i) * N + j];
    }
  return out;
}

template <class L>
Buffer<L> to_device16(const std::vector<float>& v) {
  Buffer<float> f = from_host(v);
  Buffer<L> out("x16", v.size());
  convert<L, float>(Vec<L>(out.data(), v.size()), Vec<const float>(f.data(), v.size()));
  return out;
}

// A GEMM's random operands (M x K, K x N) and starting C (M x N), tight leading dimensions.
struct GemmOperands {
  std::vector<float> A, B, C0;
};
GemmOperands random_operands(int M, int N, int K) {
  return {random_floats(size_t(M) * K, 1), random_floats(size_t(K) * N, 2), random_floats(size_t(M) * N, 3)};
}
double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst;
}

template <class L>
void check_gemm16(bool force_convert) {
  gemm_lowp_force_convert(force_convert);
  struct Shape {
    int M, N, K;
  };
  // Odd shapes: no kernel's favourite. The second's reduction is long against its output (as the LM
  // head's input gradient over the vocabulary): oneDNN sums it over slices of K, the last one shorter.
  for (auto [M, N, K] : {Shape{37, 29, 70}, Shape{5, 7, 203}})
    for (Op oa : {Op::N, Op::T})
      for (Op ob : {Op::N, Op::T})
        for (float beta : {0.0f, 1.0f}) {
          const GemmOperands x = random_operands(M, N, K);
          const std::vector<double> want =
              reference_gemm(oa, ob, M, N, K, 0.5, rounded<L>(x.A), rounded<L>(x.B), beta, x.C0);
          Buffer<L> a = to_device16<L>(x.A), b = to_device16<L>(x.B);
          Buffer<float> c = from_host(x.C0);
          gemm_lowp<L>(oa, ob, M, N, K, 0.5f, a.data(), oa == Op::N ? K : M, b.data(), ob == Op::N ? N : K, beta,
                       c.data(), N);
          Kokkos::fence();
          // fp32 accumulation of K products of magnitude <= 1: well inside 1e-4.
          EXPECT_LT(max_abs_error(to_host(c), want), 1e-4)
              << gemm_lowp_backend(std::is_same_v<L, bf16>) << " op " << int(oa) << int(ob) << " beta " << beta
              << " K " << K;
        }
  gemm_lowp_force_convert(false);
}
}  // namespace

TEST(Kernels, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf(1.0f), 1.0f);
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // a tie: to the even neighbour (1)
  EXPECT_EQ(bf(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // a tie: up to even
  EXPECT_EQ(bf(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)), 1.0f + std::ldexp(1.0f, -7));  // past it
  EXPECT_EQ(bf(-3.140625f), -3.140625f);  // exact in 8 bits of mantissa
  EXPECT_NEAR(bf(3.0e38f), 3.0e38f, 3.0e38f / 256);  // fp32's range: large values stay finite
  EXPECT_TRUE(std::isfinite(bf(3.0e38f)));
  EXPECT_TRUE(std::isinf(bf(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(bf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
}

TEST(Kernels, Fp16RoundsAndOverflowsToInfinity) {
  EXPECT_EQ(hf(65504.0f), 65504.0f);  // the largest finite half
  EXPECT_EQ(hf(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(hf(65520.0f)));  // rounds up past the largest: infinity (loss scaling sees it)
  EXPECT_TRUE(std::isinf(hf(-1e6f)) && hf(-1e6f) < 0);
  EXPECT_EQ(hf(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(hf(std::ldexp(1.0f, -26)), 0.0f);                    // below half of it
  EXPECT_EQ(hf(1.0f + std::ldexp(1.0f, -11)), 1.0f);             // a tie: to even
  EXPECT_EQ(hf(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(hf(std::numeric_limits<float>::quiet_NaN())));
  // Every finite half survives float and back, and float's conversion is the exact value.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    fp16 h;
    h.bits = uint16_t(b);
    const float f = h;
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp16(f).bits, h.bits) << b;
  }
  fp16 min_normal;
  min_normal.bits = 0x0400;
  EXPECT_EQ(float(min_normal), std::ldexp(1.0f, -14));
}

namespace {
// check(opA, opB, beta) for each host library choice (automatic, OpenBLAS alone, oneDNN alone), both
// forms of A and B, and beta 0 and 1.
void for_every_fp32_gemm_form(const std::function<void(Op, Op, float)>& check) {
  for (HostGemm lib : {HostGemm::automatic, HostGemm::openblas, HostGemm::onednn}) {
    gemm_set_host_f32(lib);
    for (Op oa : {Op::N, Op::T})
      for (Op ob : {Op::N, Op::T})
        for (float beta : {0.0f, 1.0f}) check(oa, ob, beta);
  }
  gemm_set_host_f32(HostGemm::automatic);
}
}  // namespace

// fp32 GEMMs in every form, alpha and beta, against double, through every library choice; they
// agree to fp32 rounding. The second shape's reduction is long against its output (as the LM head's
// input gradient over the vocabulary): oneDNN sums it over slices of K, the last one shorter.
TEST(Kernels, GemmF32MatchesDoubleWhicheverLibrary) {
  struct Shape {
    int M, N, K;
  };
  for (auto [M, N, K] : {Shape{37, 29, 70}, Shape{5, 7, 203}})
    for_every_fp32_gemm_form([&, M = M, N = N, K = K](Op oa, Op ob, float beta) {
      const GemmOperands x = random_operands(M, N, K);
      Buffer<float> a = from_host(x.A), b = from_host(x.B), c = from_host(x.C0);
      gemm<float>(oa, ob, M, N, K, 0.5f, a.data(), oa == Op::N ? K : M, b.data(), ob == Op::N ? N : K, beta,
                  c.data(), N);
      Kokkos::fence();
      EXPECT_LT(max_abs_error(to_host(c), reference_gemm(oa, ob, M, N, K, 0.5, x.A, x.B, beta, x.C0)), 1e-4)
          << gemm_host_f32_backend() << " op " << int(oa) << int(ob) << " beta " << beta << " K " << K;
    });
}

// Attention's strided batches in every form, through each library choice: matrix i of group g of A, B
// and C starts g group strides and i strides on (the strides longer than a matrix, as heads side by
// side in a row are not; each operand's group stride its own, as a sequence's rows are).
TEST(Kernels, GemmStridedBatchedF32MatchesDoubleWhicheverLibrary) {
  const int M = 9, N = 7, K = 11, batch = 3;
  const int64_t sA = M * K + 5, sB = K * N + 3, sC = M * N + 2;
  const GemmGroups groups{2, batch * sA + 7, batch * sB + 11, batch * sC + 4};
  const auto at = [&](int g, int i, int64_t s, int64_t gs) { return g * gs + i * s; };
  for_every_fp32_gemm_form([&](Op oa, Op ob, float beta) {
    const std::vector<float> A = random_floats(size_t(groups.A) * groups.count, 4),
                             B = random_floats(size_t(groups.B) * groups.count, 5),
                             C0 = random_floats(size_t(groups.C) * groups.count, 6);
    const int lda = oa == Op::N ? K : M, ldb = ob == Op::N ? N : K;
    Buffer<float> a = from_host(A), b = from_host(B), c = from_host(C0);
    gemm_strided_batched<float>(oa, ob, M, N, K, 0.5f, a.data(), lda, sA, b.data(), ldb, sB, beta, c.data(), N,
                                sC, batch, groups);
    Kokkos::fence();
    const std::vector<float> got = to_host(c);
    std::vector<bool> written(got.size(), false);
    for (int g = 0; g < groups.count; ++g)
      for (int i = 0; i < batch; ++i) {
        const auto part = [&](const std::vector<float>& v, int64_t start, size_t n) {
          return std::vector<float>(v.begin() + start, v.begin() + start + long(n));
        };
        const int64_t c0 = at(g, i, sC, groups.C);
        const std::vector<double> want =
            reference_gemm(oa, ob, M, N, K, 0.5, part(A, at(g, i, sA, groups.A), size_t(M) * K),
                           part(B, at(g, i, sB, groups.B), size_t(K) * N), beta, part(C0, c0, size_t(M) * N));
        EXPECT_LT(max_abs_error(part(got, c0, size_t(M) * N), want), 1e-4)
            << gemm_host_f32_backend() << " op " << int(oa) << int(ob) << " beta " << beta << " group " << g
            << " matrix " << i;
        std::fill(written.begin() + c0, written.begin() + c0 + M * N, true);
      }
    // The gaps between the matrices and the groups are not written.
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_TRUE(written[j] || got[j] == C0[j]) << "element " << j << " written outside every matrix";
  });
}

// The benchmarks' per-operation tables name each GEMM by what the observer is told: every dispatch
// tells it the call's shape, leading dimensions, batch, accumulation and dtypes, once before and once
// after the library call, and nothing once the observer is removed.
namespace {
std::vector<std::pair<GemmCall, bool>> g_seen;
}
TEST(Kernels, GemmDispatchTellsTheObserverEachCall) {
  const int M = 6, N = 5, K = 4;
  Buffer<float> a("a", 64), b("b", 64), c("c", 64);
  Buffer<double> ad("ad", 64), bd("bd", 64), cd("cd", 64);
  Buffer<bf16> a16("a16", 64), b16("b16", 64);
  g_seen.clear();
  set_gemm_observer([](const GemmCall& call, bool issued) { g_seen.emplace_back(call, issued); });
  gemm<float>(Op::N, Op::T, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  gemm<double>(Op::T, Op::N, M, N, K, 1.0, ad.data(), M, bd.data(), N, 1.0, cd.data(), N);
  gemm_strided_batched<float>(Op::N, Op::N, 2, 3, 2, 1.0f, a.data(), 2, 4, b.data(), 3, 6, 1.0f, c.data(), 3, 6, 3);
  gemm_lowp<bf16>(Op::T, Op::T, M, N, K, 1.0f, a16.data(), M, b16.data(), K, 0.0f, c.data(), N);
  Kokkos::fence();
  set_gemm_observer(nullptr);
  gemm<float>(Op::N, Op::N, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  struct Want {
    Op oa, ob;
    int M, N, K, batch, lda, ldb, ldc;
    bool acc;
    std::string in, out;
  };
  const std::string lowp_in = gemm_lowp_backend(true) == "convert+BLAS" ? "f32" : "bf16";
  const std::vector<Want> want = {{Op::N, Op::T, M, N, K, 1, K, K, N, false, "f32", "f32"},
                                  {Op::T, Op::N, M, N, K, 1, M, N, N, true, "f64", "f64"},
                                  {Op::N, Op::N, 2, 3, 2, 3, 2, 3, 3, true, "f32", "f32"},
                                  {Op::T, Op::T, M, N, K, 1, M, K, N, false, lowp_in, "f32"}};
  ASSERT_EQ(g_seen.size(), 2 * want.size());
  for (size_t i = 0; i < g_seen.size(); ++i) {
    const GemmCall& g = g_seen[i].first;
    const Want& w = want[i / 2];
    EXPECT_EQ(g_seen[i].second, i % 2 == 1) << "call " << i / 2 << ": before, then after";
    EXPECT_TRUE(g.opA == w.oa && g.opB == w.ob) << "call " << i / 2;
    EXPECT_EQ(std::vector<int>({g.M, g.N, g.K, g.batch, g.lda, g.ldb, g.ldc}),
              std::vector<int>({w.M, w.N, w.K, w.batch, w.lda, w.ldb, w.ldc}))
        << "call " << i / 2;
    EXPECT_EQ(g.accumulate, w.acc) << "call " << i / 2;
    EXPECT_EQ(std::string(g.in), w.in) << "call " << i / 2;
    EXPECT_EQ(std::string(g.out), w.out) << "call " << i / 2;
  }
}

TEST(Kernels, GemmBf16MatchesDoubleOfRoundedInputs) { check_gemm16<bf16>(false); }
TEST(Kernels, GemmBf16ConvertingPathMatches) { check_gemm16<bf16>(true); }
TEST(Kernels, GemmFp16MatchesDoubleOfRoundedInputs) { check_gemm16<fp16>(false); }

// LayerNorm and GELU writing bf16 store exactly their fp32 results rounded.
TEST(Kernels, LayerNormAndGeluWrite16BitOutputs) {
  const int N = 5, C = 48;
  Buffer<float> in = from_host(random_floats(size_t(N) * C, 4)), w = from_host(random_floats(C, 5)),
                b = from_host(random_floats(C, 6)), mean("mean", N), rstd("rstd", N), out32("out32", N * C);
  Buffer<bf16> out16("out16", N * C);
  const CMat<float> x(in.data(), N, C);
  layernorm_forward<float>(Mat<float>(out32.data(), N, C), Vec<float>(mean.data(), N), Vec<float>(rstd.data(), N), x,
                           Vec<float>(w.data(), C), Vec<float>(b.data(), C));
  layernorm_forward<float>(Mat<bf16>(out16.data(), N, C), Vec<float>(mean.data(), N), Vec<float>(rstd.data(), N), x,
                           Vec<float>(w.data(), C), Vec<float>(b.data(), C));
  Kokkos::fence();
  const std::vector<float> f32 = to_host(out32);
  auto h16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out16);
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(h16(i).bits, bf16(f32[size_t(i)]).bits) << i;
  Buffer<fp16> g16("g16", N * C);
  gelu_forward<float>(Vec<fp16>(g16.data(), N * C), Vec<const float>(in.data(), N * C));
  gelu_forward<float>(Vec<float>(out32.data(), N * C), Vec<const float>(in.data(), N * C));
  Kokkos::fence();
  const std::vector<float> g32 = to_host(out32);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g16);
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(hg(i).bits, fp16(g32[size_t(i)]).bits) << i;
}

// The fused loss writes the logits gradient in 16 bits directly: the fp32 gradient, rounded.
TEST(Kernels, CrossEntropyWrites16BitGradients) {
  const int N = 6, V = 50, Vp = 64;
  const std::vector<float> logits = random_floats(size_t(N) * Vp, 7);
  Buffer<float> l32 = from_host(logits), l16 = from_host(logits), loss32("loss32", N), loss16("loss16", N);
  Buffer<bf16> d16("d16", size_t(N) * Vp);
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> targets("targets", N);
  auto ht = Kokkos::create_mirror_view(targets);
  for (int n = 0; n < N; ++n) ht(n) = (7 * n + 3) % V;
  Kokkos::deep_copy(targets, ht);
  crossentropy_fused<float>(Vec<float>(loss32.data(), N), Mat<float>(l32.data(), N, Vp), targets, V, 0.25f);
  crossentropy_fused<float>(Vec<float>(loss16.data(), N), Mat<float>(l16.data(), N, Vp), targets, V, 0.25f,
                            Mat<bf16>(d16.data(), N, Vp));
  Kokkos::fence();
  EXPECT_EQ(to_host(loss32), to_host(loss16));
  const std::vector<float> g32 = to_host(l32);
  auto h16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d16);
  for (int i = 0; i < N * Vp; ++i) ASSERT_EQ(h16(i).bits, bf16(g32[size_t(i)]).bits) << i;
}

// Linear in bf16: the forward, input-gradient and weight-gradient GEMMs each see bf16-rounded
// operands (and differ from fp32's, so the rounding is really there); biases are added in fp32.
TEST(Kernels, LinearBf16RoundsEveryGemmInput) {
  const int N = 6, C = 40, OC = 24;
  const std::vector<float> x = random_floats(size_t(N) * C, 7), w = random_floats(size_t(OC) * C, 8),
                           bias = random_floats(OC, 9), dy = random_floats(size_t(N) * OC, 10);
  const std::vector<float> zeros_out(size_t(N) * OC, 0.0f), zeros_in(size_t(N) * C, 0.0f), zeros_w(size_t(OC) * C, 0.0f);
  Buffer<float> X = from_host(x), W = from_host(w), Bb = from_host(bias), DY = from_host(dy);
  Buffer<float> Y("y", N * OC), DX("dx", N * C), DW("dw", OC * C), DB("db", OC);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    Linear<float> lin(p);
    Kokkos::deep_copy(DW, 0.0f);
    Kokkos::deep_copy(DB, 0.0f);
    lin.forward(Mat<float>(Y.data(), N, OC), CMat<float>(X.data(), N, C), CMat<float>(W.data(), OC, C),
                Vec<float>(Bb.data(), OC));
    lin.backward_input(Mat<float>(DX.data(), N, C), CMat<float>(DY.data(), N, OC), CMat<float>(W.data(), OC, C));
    lin.backward_weight(Mat<float>(DW.data(), OC, C), Vec<float>(DB.data(), OC), CMat<float>(DY.data(), N, OC),
                        CMat<float>(X.data(), N, C));
    Kokkos::fence();
    auto r = [&](const std::vector<float>& v) { return p == Precision::bf16 ? rounded<bf16>(v) : v; };
    std::vector<double> y = reference_gemm(Op::N, Op::T, N, OC, C, 1, r(x), r(w), 0, zeros_out);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) y[size_t(n) * OC + o] += bias[size_t(o)];
    const std::vector<double> dx = reference_gemm(Op::N, Op::N, N, C, OC, 1, r(dy), r(w), 0, zeros_in);
    const std::vector<double> dw = reference_gemm(Op::T, Op::N, OC, C, N, 1, r(dy), r(x), 0, zeros_w);
    const std::vector<double> y32 = reference_gemm(Op::N, Op::T, N, OC, C, 1, x, w, 0, zeros_out);
    double err = 0, off32 = 0;
    auto compare = [&](const std::vector<float>& got, const std::vector<double>& want) {
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
    };
    compare(to_host(Y), y);
    compare(to_host(DX), dx);
    compare(to_host(DW), dw);
    const std::vector<float> gy = to_host(Y);
    for (size_t i = 0; i < gy.size(); ++i) off32 = std::max(off32, std::abs(gy[i] - bias[i % OC] - y32[i]));
    EXPECT_LT(err, 1e-4) << precision_name(p);
    if (p == Precision::bf16) {
      EXPECT_GT(off32, 1e-3) << "bf16 products should differ from fp32's";
    }
    const std::vector<float> db = to_host(DB);
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int n = 0; n < N; ++n) s += dy[size_t(n) * OC + o];
      EXPECT_NEAR(db[size_t(o)], s, 1e-5);  // the bias gradient from the fp32 output gradient
    }
  }
}

// A forward product's bias and residual, added inside the library's call where the build can
// (oneDNN: a bias argument and a binary-add post-op; cuBLASLt: its bias epilogue, the residual its C)
// or in a pass after it: in fp32 through each host library choice, in bf16 and in fp16, with a bias,
// a residual or both, on aligned and shifted operands, the output equals the double product of the
// (rounded) inputs plus both.
TEST(Kernels, LinearForwardAddsBiasAndResidualInsideTheProductOrAfter) {
  const int N = 7, C = 40, OC = 24;
  const std::vector<float> x = random_floats(size_t(N) * C, 11), w = random_floats(size_t(OC) * C, 12),
                           bias = random_floats(OC, 13), res = random_floats(size_t(N) * OC, 14);
  // Each operand `shift` values into its buffer: with shift 1 a library that picks its kernels by the
  // pointers' alignment (cuBLASLt) meets operands aligned to 4 bytes, not only to the allocation's 256.
  auto shifted = [](const std::vector<float>& v, int shift) {
    std::vector<float> s(v.size() + size_t(shift), 0.0f);
    std::copy(v.begin(), v.end(), s.begin() + shift);
    return from_host(s);
  };
  struct Case {
    Precision p;
    HostGemm lib;
  };
  for (Case c : {Case{Precision::fp32, HostGemm::automatic}, Case{Precision::fp32, HostGemm::openblas},
                 Case{Precision::bf16, HostGemm::automatic}, Case{Precision::fp16, HostGemm::automatic}})
    for (int shift : {0, 1})
      for (int adds : {1, 2, 3}) {  // bit 0 the bias, bit 1 the residual
        Buffer<float> X = shifted(x, shift), W = shifted(w, shift), Bb = shifted(bias, shift),
                      R = shifted(res, shift), Y("y", N * OC + shift);
        gemm_set_host_f32(c.lib);
        Linear<float> lin(c.p);
        const CVec<float> b = adds & 1 ? CVec<float>(Bb.data() + shift, OC) : CVec<float>();
        const CMat<float> r = adds & 2 ? CMat<float>(R.data() + shift, N, OC) : CMat<float>();
        lin.forward(Mat<float>(Y.data() + shift, N, OC), CMat<float>(X.data() + shift, N, C),
                    CMat<float>(W.data() + shift, OC, C), b, r);
        Kokkos::fence();
        auto rd = [&](const std::vector<float>& v) {
          return c.p == Precision::bf16 ? rounded<bf16>(v) : c.p == Precision::fp16 ? rounded<fp16>(v) : v;
        };
        std::vector<double> want =
            reference_gemm(Op::N, Op::T, N, OC, C, 1, rd(x), rd(w), 0, std::vector<float>(size_t(N) * OC, 0.0f));
        for (size_t i = 0; i < want.size(); ++i)
          want[i] += (adds & 1 ? bias[i % OC] : 0.0) + (adds & 2 ? res[i] : 0.0);
        std::vector<float> got = to_host(Y);
        got.erase(got.begin(), got.begin() + shift);  // (what is left: the N x OC output)
        EXPECT_LT(max_abs_error(got, want), 1e-5)
            << precision_name(c.p) << " " << gemm_host_f32_backend() << " shift " << shift << " adds " << adds
            << (lin.fuses_epilogue() ? " (in the product)" : " (a pass after it)");
      }
  gemm_set_host_f32(HostGemm::automatic);
}

// fp16's dynamic loss scale: an overflow halves it and restarts the count, `window` clean steps in a
// row double it, it stays within its bounds, and without fp16 it is 1 whatever happens.
TEST(LossScale, HalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScale s(true, 1024, 3);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 512);  // two clean steps: not yet
  s.update(true);              // an overflow restarts the count
  EXPECT_EQ(s.scale(), 256);
  s.update(false), s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.clean_steps(), 0);
  for (int i = 0; i < 200; ++i) s.update(true);
  EXPECT_EQ(s.scale(), LossScale::kMin);
  LossScale big(true, 1e30, 1);
  big.update(false);
  EXPECT_EQ(big.scale(), LossScale::kMax);
  LossScale off(false, 65536, 1);
  off.update(true), off.update(false);
  EXPECT_EQ(off.scale(), 1.0);
  off.restore(8, 2);  // a checkpoint's scale does not switch scaling on
  EXPECT_EQ(off.scale(), 1.0);
  s.restore(std::nan(""), 0);  // nor does a corrupt one replace a good scale
  EXPECT_EQ(s.scale(), LossScale::kMin);
}
