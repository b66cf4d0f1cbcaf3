// Finite-difference gradient checks in double for every kernel's backward, plus forward checks
// against direct host formulas.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "tensor/adamw_update.hpp"
#include "tensor/attention.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"
#include "tensor/residual.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;
using D = double;

namespace {
Mat<D> M(const Buffer<D>& b, size_t r, size_t c) { return Mat<D>(b.data(), r, c); }
Vec<D> V(const Buffer<D>& b) { return Vec<D>(b.data(), b.extent(0)); }
constexpr double h = 1e-5;
// v(i) = v(i)^2 on the device. Kept out of the TEST bodies: nvcc rejects an extended
// (KOKKOS_LAMBDA) lambda inside the private TestBody() that TEST() generates.
void square_in_place(const Buffer<D>& v) {
  Kokkos::parallel_for(
      Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)), KOKKOS_LAMBDA(int i) { v(i) = v(i) * v(i); });
}
}  // namespace

TEST(Kernels, LayerNormForwardMatchesFormula) {
  const int N = 3, C = 8;
  auto in = random_buffer<D>(N * C, 1, 2.0), w = random_buffer<D>(C, 2), b = random_buffer<D>(C, 3);
  Buffer<D> out("out", N * C), mean("mean", N), rstd("rstd", N);
  layernorm_forward<D>(M(out, N, C), V(mean), V(rstd), M(in, N, C), V(w), V(b));
  auto hi = to_host(in), hw = to_host(w), hb = to_host(b), ho = to_host(out);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += hi[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (hi[n * C + c] - m) * (hi[n * C + c] - m) / C;
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(ho[n * C + c], (hi[n * C + c] - m) / std::sqrt(v + 1e-5) * hw[c] + hb[c], 1e-12);
  }
}

TEST(Kernels, LayerNormGradcheck) {
  const int N = 4, C = 20;  // (not a multiple of 8: a host team sums the last 4 on their own)
  auto in = random_buffer<D>(N * C, 1, 2.0), w = random_buffer<D>(C, 2), b = random_buffer<D>(C, 3);
  auto R = random_vector(N * C, 4);
  auto dout = from_host(R);
  Buffer<D> out("out", N * C), mean("mean", N), rstd("rstd", N);
  auto loss = [&] {
    layernorm_forward<D>(M(out, N, C), V(mean), V(rstd), M(in, N, C), V(w), V(b));
    return dot(to_host(out), R);
  };
  loss();
  // din accumulates: start from a known non-zero value and subtract it.
  auto base = random_vector(N * C, 5);
  auto din = from_host(base);
  Buffer<D> dw("dw", C), db("db", C);
  layernorm_backward<D>(M(din, N, C), V(dw), V(db), M(dout, N, C), M(in, N, C), V(w), V(mean),
                        V(rstd));
  auto gin = to_host(din);
  for (size_t i = 0; i < gin.size(); ++i) gin[i] -= base[i];
  EXPECT_LE(gradcheck(in, gin, loss, h), 1.0);
  EXPECT_LE(gradcheck(w, to_host(dw), loss, h), 1.0);
  EXPECT_LE(gradcheck(b, to_host(db), loss, h), 1.0);
}

TEST(Kernels, MatmulGradcheck) {
  const int N = 5, C = 7, OC = 6;
  auto in = random_buffer<D>(N * C, 1), w = random_buffer<D>(OC * C, 2), b = random_buffer<D>(OC, 3);
  auto res = random_buffer<D>(N * OC, 9);
  auto R = random_vector(N * OC, 4);
  auto dout = from_host(R);
  Buffer<D> out("out", N * OC);
  auto loss = [&] {
    matmul_forward<D>(M(out, N, OC), M(in, N, C), M(w, OC, C), V(b), M(res, N, OC));
    return dot(to_host(out), R);
  };
  loss();
  // forward against the formula
  auto ho = to_host(out), hi = to_host(in), hw = to_host(w), hb = to_host(b), hr = to_host(res);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = hb[o] + hr[n * OC + o];
      for (int c = 0; c < C; ++c) s += hi[n * C + c] * hw[o * C + c];
      EXPECT_NEAR(ho[n * OC + o], s, 1e-12);
    }
  Buffer<D> din("din", N * C), dw("dw", OC * C), db("db", OC);
  matmul_backward<D>(M(din, N, C), M(dw, OC, C), V(db), M(dout, N, OC), M(in, N, C), M(w, OC, C));
  EXPECT_LE(gradcheck(in, to_host(din), loss, h), 1.0);
  EXPECT_LE(gradcheck(w, to_host(dw), loss, h), 1.0);
  EXPECT_LE(gradcheck(b, to_host(db), loss, h), 1.0);
  EXPECT_LE(gradcheck(res, R, loss, h), 1.0);
  // accumulate_din adds to what is there; dw/db always accumulate
  matmul_backward<D>(M(din, N, C), M(dw, OC, C), V(db), M(dout, N, OC), M(in, N, C), M(w, OC, C),
                     true);
  auto din2 = to_host(din), dw2 = to_host(dw);
  matmul_backward<D>(M(din, N, C), M(dw, OC, C), V(db), M(dout, N, OC), M(in, N, C), M(w, OC, C));
  auto din1 = to_host(din);
  for (size_t i = 0; i < din1.size(); ++i) EXPECT_NEAR(din2[i], 2 * din1[i], 1e-12);
  EXPECT_NEAR(to_host(dw)[3], 1.5 * dw2[3], 1e-12);
}

// The fused forward passes give the values of the passes they replace, bit for bit: each output
// element comes from the same operations in the same order (and in bf16 storage as well).
TEST(Kernels, FusedBiasGeluAndResidualLayerNormEqualTheirParts) {
  const int N = 7, C = 37;
  auto x = random_buffer<D>(N * C, 1), bias = random_buffer<D>(C, 2), res = random_buffer<D>(N * C, 3);
  auto w = random_buffer<D>(C, 4), b = random_buffer<D>(C, 5);
  // bias + GELU
  auto pre1 = random_buffer<D>(N * C, 1), pre2 = random_buffer<D>(N * C, 1);
  Buffer<D> g1("g1", N * C), g2("g2", N * C);
  add_bias_residual<D>(M(pre1, N, C), V(bias));
  gelu_forward<D>(V(g1), V(pre1));
  bias_gelu_forward<D>(M(pre2, N, C), V(bias), M(g2, N, C));
  EXPECT_EQ(to_host(pre1), to_host(pre2));
  EXPECT_EQ(to_host(g1), to_host(g2));
  EXPECT_NE(to_host(pre2), to_host(x)) << "the bias was added";
  // residual + LayerNorm
  auto x1 = random_buffer<D>(N * C, 1), x2 = random_buffer<D>(N * C, 1);
  Buffer<D> o1("o1", N * C), o2("o2", N * C), m1("m1", N), m2("m2", N), r1("r1", N), r2("r2", N);
  add_bias_residual<D>(M(x1, N, C), V(bias), M(res, N, C));
  layernorm_forward<D>(M(o1, N, C), V(m1), V(r1), M(x1, N, C), V(w), V(b));
  residual_layernorm_forward<D>(M(x2, N, C), V(bias), M(res, N, C), M(o2, N, C), V(m2), V(r2), V(w), V(b));
  EXPECT_EQ(to_host(x1), to_host(x2));
  EXPECT_EQ(to_host(o1), to_host(o2));
  EXPECT_EQ(to_host(m1), to_host(m2));
  EXPECT_EQ(to_host(r1), to_host(r2));
  // 16-bit outputs (mixed precision): the statistics in fp32, the output rounded once.
  auto f1 = random_buffer<float>(N * C, 6), f2 = random_buffer<float>(N * C, 6), fr = random_buffer<float>(N * C, 7);
  auto fb = random_buffer<float>(C, 8), fw = random_buffer<float>(C, 9), fbb = random_buffer<float>(C, 10);
  Buffer<bf16> h1("h1", N * C), h2("h2", N * C);
  Buffer<float> fm1("fm1", N), fm2("fm2", N), fs1("fs1", N), fs2("fs2", N);
  using MF = Mat<float>;
  using VF = Vec<float>;
  add_bias_residual<float>(MF(f1.data(), N, C), VF(fb.data(), C), MF(fr.data(), N, C));
  layernorm_forward<float>(Mat<bf16>(h1.data(), N, C), VF(fm1.data(), N), VF(fs1.data(), N), MF(f1.data(), N, C),
                           VF(fw.data(), C), VF(fbb.data(), C));
  residual_layernorm_forward<float>(MF(f2.data(), N, C), VF(fb.data(), C), MF(fr.data(), N, C), Mat<bf16>(h2.data(), N, C),
                                    VF(fm2.data(), N), VF(fs2.data(), N), VF(fw.data(), C), VF(fbb.data(), C));
  const auto bits = [](const Buffer<bf16>& v) {
    std::vector<uint16_t> out;
    for (bf16 x : to_host(v)) out.push_back(x.bits);
    return out;
  };
  EXPECT_EQ(bits(h1), bits(h2));
  EXPECT_EQ(to_host(f1), to_host(f2));
}

TEST(Kernels, GeluGradcheck) {
  const int n = 50;
  auto in = random_buffer<D>(n, 1, 3.0);
  auto R = random_vector(n, 4);
  auto dout = from_host(R);
  Buffer<D> out("out", n);
  auto loss = [&] {
    gelu_forward<D>(V(out), V(in));
    return dot(to_host(out), R);
  };
  loss();
  auto hi = to_host(in), ho = to_host(out);
  for (int i = 0; i < n; ++i) {
    const double x = hi[i];
    EXPECT_NEAR(ho[i], 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),
                1e-12);
  }
  gelu_backward<D>(V(dout), V(in));  // in place: dout becomes din
  EXPECT_LE(gradcheck(in, to_host(dout), loss, h), 1.0);
}

// The MLP's fused backward pass (GELU's backward, the fc bias gradient, the GEMMs' 16-bit operand):
// both gradients against central differences of bias + GELU, and the 16-bit output the rounding of
// the fp32 one.
TEST(Kernels, GeluBiasBackwardGradcheck) {
  const int N = 9, C = 21;
  auto pre0 = random_buffer<D>(N * C, 1, 2.0), b = random_buffer<D>(C, 2);
  auto R = random_vector(N * C, 3);
  Buffer<D> pre("pre", N * C), out("out", N * C), db("db", C);
  auto loss = [&] {
    Kokkos::deep_copy(pre, pre0);
    bias_gelu_forward<D>(M(pre, N, C), V(b), M(out, N, C));
    return dot(to_host(out), R);
  };
  loss();  // pre = pre0 + b, as the backward finds it
  auto d = from_host(R);
  Kokkos::deep_copy(db, 0.5);  // accumulated into
  gelu_bias_backward<D, D>(M(d, N, C), V(db), M(d, N, C), M(pre, N, C));  // in place
  EXPECT_LE(gradcheck(pre0, to_host(d), loss, h), 1.0);
  auto hdb = to_host(db);
  for (double& x : hdb) x -= 0.5;
  EXPECT_LE(gradcheck(b, hdb, loss, h), 1.0);
  // In fp32, and into a bf16 copy (the fp32 gradient untouched): the same sums, each value rounded once.
  const std::vector<float> fR(R.begin(), R.end()), hpre = [&] {
    const auto p = to_host(pre);
    return std::vector<float>(p.begin(), p.end());
  }();
  auto fd = from_host(fR), fd2 = from_host(fR), fpre = from_host(hpre);
  Buffer<bf16> low("low", N * C);
  Buffer<float> fdb("fdb", C), fdb2("fdb2", C);
  using MF = Mat<float>;
  gelu_bias_backward<float, float>(MF(fd.data(), N, C), Vec<float>(fdb.data(), C), MF(fd.data(), N, C), MF(fpre.data(), N, C));
  gelu_bias_backward<float, bf16>(Mat<bf16>(low.data(), N, C), Vec<float>(fdb2.data(), C), MF(fd2.data(), N, C),
                                  MF(fpre.data(), N, C));
  const auto hf = to_host(fd);
  const auto hl = to_host(low);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(hl[size_t(i)].bits, bf16(hf[size_t(i)]).bits) << i;
  EXPECT_EQ(to_host(fd2), fR);
  EXPECT_EQ(to_host(fdb), to_host(fdb2));
}

TEST(Kernels, ResidualForward) {
  auto a = random_buffer<D>(10, 1), b = random_buffer<D>(10, 2);
  Buffer<D> out("out", 10);
  residual_forward<D>(V(out), V(a), V(b));
  auto ha = to_host(a), hb = to_host(b), ho = to_host(out);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ho[i], ha[i] + hb[i]);
  accumulate<D>(V(out), V(a));
  ho = to_host(out);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ho[i], ha[i] + hb[i] + ha[i]);
}

TEST(Kernels, EmbeddingGradcheck) {
  const int B = 2, T = 3, C = 4, Vp = 5, maxT = 4, N = B * T;
  auto tok = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("tok", N);
  auto ht = Kokkos::create_mirror_view(tok);
  const int ids[N] = {1, 3, 1, 0, 1, 4};  // repeated ids exercise the scatter-add
  for (int i = 0; i < N; ++i) ht(i) = ids[i];
  Kokkos::deep_copy(tok, ht);
  auto wte = random_buffer<D>(Vp * C, 1), wpe = random_buffer<D>(maxT * C, 2);
  auto R = random_vector(N * C, 4);
  auto dout = from_host(R);
  Buffer<D> out("out", N * C);
  auto loss = [&] {
    embedding_forward<D>(M(out, N, C), tok, M(wte, Vp, C), M(wpe, maxT, C), T);
    return dot(to_host(out), R);
  };
  loss();
  Buffer<D> dwte("dwte", Vp * C), dwpe("dwpe", maxT * C);
  TokenGroups groups;
  groups.allocate(N);
  std::vector<int> staging(TokenGroups::table_size(N));
  group_tokens(groups, ids, N, staging.data());
  Buffer<D> parts("parts", size_t(TokenGroups::max_parts(N)) * C);
  embedding_backward<D>(M(dwte, Vp, C), M(dwpe, maxT, C), M(dout, N, C), groups, M(parts, groups.parts, C), T);
  EXPECT_LE(gradcheck(wte, to_host(dwte), loss, h), 1.0);
  EXPECT_LE(gradcheck(wpe, to_host(dwpe), loss, h), 1.0);
}

// The wte gradient's two stages: tokens with several chunks of rows (one token on 150 of 400 rows,
// another on 50, the rest spread over 20 ids) and a vocabulary shard (rows [5, 15) of
// the table: other tokens are another rank's). Against a row-order sum in double; the groups hold
// every row once, each chunk one token's rows in row order.
TEST(Kernels, EmbeddingBackwardSumsEveryTokensRowsOnItsShard) {
  const int N = 400, T = 8, C = 19, shard_begin = 5, shard_rows = 10, V = 20;
  std::vector<int> ids(N);
  Rng r(3);
  for (int n = 0; n < N; ++n) ids[size_t(n)] = n % 8 < 3 ? 7 : n % 8 == 3 ? 9 : int(r.below(V));
  TokenGroups g;
  g.allocate(N);
  std::vector<int> staging(TokenGroups::table_size(N));
  group_tokens(g, ids.data(), N, staging.data());
  std::vector<int> seen(N, 0);
  auto rows = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g.rows);
  auto begin = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g.chunk_begin);
  auto token = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g.chunk_token);
  for (int ch = 0; ch < g.chunks; ++ch) {
    EXPECT_LE(begin(ch + 1) - begin(ch), TokenGroups::kChunk);
    for (int i = begin(ch); i < begin(ch + 1); ++i) {
      ++seen[size_t(rows(i))];
      EXPECT_EQ(ids[size_t(rows(i))], token(ch));
      if (i > begin(ch)) {
        EXPECT_LT(rows(i - 1), rows(i));
      }
    }
  }
  for (int n = 0; n < N; ++n) EXPECT_EQ(seen[size_t(n)], 1) << "row " << n;
  EXPECT_GE(g.runs, 1);  // token 7's 150 rows: three chunks
  EXPECT_LE(g.parts, TokenGroups::max_parts(N));

  const auto R = random_vector(size_t(N) * C, 8);
  auto dout = from_host(R);
  auto dwte = random_buffer<D>(size_t(shard_rows) * C, 9), dwpe = random_buffer<D>(size_t(T) * C, 10);
  std::vector<double> want_wte = to_host(dwte), want_wpe = to_host(dwpe);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const int row = ids[size_t(n)] - shard_begin;
      if (row >= 0 && row < shard_rows) want_wte[size_t(row) * C + c] += R[size_t(n) * C + c];
      want_wpe[size_t(n % T) * C + c] += R[size_t(n) * C + c];
    }
  Buffer<D> parts("parts", size_t(TokenGroups::max_parts(N)) * C);
  embedding_backward<D>(M(dwte, shard_rows, C), M(dwpe, T, C), M(dout, N, C), g, M(parts, g.parts, C), T, shard_begin);
  const auto got_wte = to_host(dwte), got_wpe = to_host(dwpe);
  for (size_t i = 0; i < want_wte.size(); ++i) EXPECT_NEAR(got_wte[i], want_wte[i], 1e-12) << "wte " << i;
  for (size_t i = 0; i < want_wpe.size(); ++i) EXPECT_NEAR(got_wpe[i], want_wpe[i], 1e-12) << "wpe " << i;
}

TEST(Kernels, AttentionForwardMatchesNaive) {
  const int B = 2, T = 5, nh = 2, C = 6, hs = C / nh, N = B * T;
  auto qkv = random_buffer<D>(N * 3 * C, 1);
  Buffer<D> out("out", N * C), att("att", B * nh * T * T);
  attention_forward<D>(M(out, N, C), M(att, B * nh * T, T), M(qkv, N, 3 * C), B, T, nh);
  auto q = to_host(qkv), o = to_host(out);
  for (int b = 0; b < B; ++b)
    for (int hh = 0; hh < nh; ++hh)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int k = 0; k < hs; ++k)
            d += q[(b * T + t) * 3 * C + hh * hs + k] * q[(b * T + j) * 3 * C + C + hh * hs + k];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int k = 0; k < hs; ++k) {
          double y = 0;
          for (int j = 0; j <= t; ++j) y += s[j] / sum * q[(b * T + j) * 3 * C + 2 * C + hh * hs + k];
          EXPECT_NEAR(o[(b * T + t) * C + hh * hs + k], y, 1e-12);
        }
      }
}

// Decoding with a KV cache: the rows of a sequence appended in pieces (a prompt of 3, then 1, 1,
// then the rest), each piece's keys and values stored and its queries run against the cache, give
// the whole-sequence attention's rows. (Generation only: the cached kernels have no backward.)
TEST(Kernels, CachedAttentionEqualsTheWholeSequencesRows) {
  const int T = 9, nh = 3, C = 12;
  auto qkv = random_buffer<D>(T * 3 * C, 4);
  Buffer<D> whole("whole", T * C), att("att", nh * T * T);
  attention_forward<D>(M(whole, T, C), M(att, nh * T, T), M(qkv, T, 3 * C), 1, T, nh);
  const auto want = to_host(whole), q = to_host(qkv);
  Buffer<D> kv("kv", (T + 2) * 2 * C), out("out", T * C), scratch("scratch", nh * T * T);
  int p0 = 0;
  for (const int n : {3, 1, 1, T - 5}) {
    auto piece = from_host(std::vector<D>(q.begin() + p0 * 3 * C, q.begin() + (p0 + n) * 3 * C));
    kv_cache_store<D>(M(kv, T + 2, 2 * C), M(piece, n, 3 * C), p0);
    attention_forward_cached<D>(M(out, n, C), V(scratch), M(piece, n, 3 * C), M(kv, T + 2, 2 * C), p0, nh);
    const auto got = to_host(out);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c)
        EXPECT_NEAR(got[i * C + c], want[(p0 + i) * C + c], 1e-13) << "row " << p0 + i << " column " << c;
    p0 += n;
  }
}

TEST(Kernels, AttentionGradcheck) {
  const int B = 2, T = 4, nh = 2, C = 6, N = B * T;
  auto qkv = random_buffer<D>(N * 3 * C, 1);
  auto R = random_vector(N * C, 4);
  auto dout = from_host(R);
  Buffer<D> out("out", N * C), att("att", B * nh * T * T), datt("datt", B * nh * T * T);
  auto loss = [&] {
    attention_forward<D>(M(out, N, C), M(att, B * nh * T, T), M(qkv, N, 3 * C), B, T, nh);
    return dot(to_host(out), R);
  };
  loss();
  Buffer<D> dqkv("dqkv", N * 3 * C);
  attention_backward<D>(M(dqkv, N, 3 * C), M(datt, B * nh * T, T), M(dout, N, C), M(qkv, N, 3 * C),
                        M(att, B * nh * T, T), B, T, nh);
  EXPECT_LE(gradcheck(qkv, to_host(dqkv), loss, h), 1.0);
}

TEST(Kernels, CrossEntropyGradcheckIgnoresPadding) {
  const int N = 4, nv = 7, Vp = 9;
  auto logits = random_buffer<D>(N * Vp, 1, 2.0);
  auto tgt = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("tgt", N);
  auto ht = Kokkos::create_mirror_view(tgt);
  for (int i = 0; i < N; ++i) ht(i) = (3 * i + 1) % nv;
  Kokkos::deep_copy(tgt, ht);
  Buffer<D> losses("losses", N), lse("lse", N);
  const double scale = 0.37;
  auto loss = [&] {
    crossentropy_forward<D>(V(losses), V(lse), M(logits, N, Vp), tgt, nv);
    double s = 0;
    for (double l : to_host(losses)) s += scale * l;
    return s;
  };
  loss();
  auto hl = to_host(logits), hloss = to_host(losses);
  for (int n = 0; n < N; ++n) {
    double sum = 0;
    for (int j = 0; j < nv; ++j) sum += std::exp(hl[n * Vp + j]);
    EXPECT_NEAR(hloss[n], std::log(sum) - hl[n * Vp + ht(n)], 1e-12);
  }
  auto dlogits = from_host(to_host(logits));
  crossentropy_backward<D>(M(dlogits, N, Vp), V(lse), tgt, nv, scale);  // in place
  auto g = to_host(dlogits);
  EXPECT_LE(gradcheck(logits, g, loss, h), 1.0);
  for (int n = 0; n < N; ++n)
    for (int j = nv; j < Vp; ++j) EXPECT_EQ(g[n * Vp + j], 0.0);
  // The fused kernel gives the same losses and gradient.
  Buffer<D> fused_losses("fused_losses", N);
  crossentropy_fused<D>(V(fused_losses), M(logits, N, Vp), tgt, nv, scale);
  auto hl2 = to_host(fused_losses), g2 = to_host(logits);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(hl2[n], hloss[n], 1e-13);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g2[i], g[i], 1e-15);
  // Its gradient written to another buffer (mixed precision: the LM head's 16-bit copy) is the same.
  auto logits3 = from_host(hl);
  Buffer<D> losses3("losses3", N), d3("d3", N * Vp);
  crossentropy_fused<D>(V(losses3), M(logits3, N, Vp), tgt, nv, scale, M(d3, N, Vp));
  EXPECT_EQ(to_host(losses3), hl2);
  EXPECT_EQ(to_host(d3), g2);
}

// A translation pair's loss covers its target only: rows whose target is negative (kIgnoreTarget)
// add 0 to the loss and get an all-zero gradient row; the others are as without a mask. The
// gradient of sum(scale * losses) checked against central differences in double, for the separate
// and the fused kernels.
TEST(Kernels, CrossEntropyMaskedRowsCarryNoLossOrGradient) {
  const int N = 6, nv = 7, Vp = 9;
  auto logits = random_buffer<D>(N * Vp, 11, 2.0);
  auto tgt = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("tgt", N);
  auto ht = Kokkos::create_mirror_view(tgt);
  const int targets[N] = {kIgnoreTarget, 3, kIgnoreTarget, 6, 0, kIgnoreTarget};
  for (int i = 0; i < N; ++i) ht(i) = targets[i];
  Kokkos::deep_copy(tgt, ht);
  Buffer<D> losses("losses", N), lse("lse", N);
  const double scale = 0.61;
  auto loss = [&] {
    crossentropy_forward<D>(V(losses), V(lse), M(logits, N, Vp), tgt, nv);
    double s = 0;
    for (double l : to_host(losses)) s += scale * l;
    return s;
  };
  loss();
  const auto hl = to_host(logits), hloss = to_host(losses);
  for (int n = 0; n < N; ++n) {
    double sum = 0;
    for (int j = 0; j < nv; ++j) sum += std::exp(hl[n * Vp + j]);
    EXPECT_NEAR(hloss[n], targets[n] < 0 ? 0.0 : std::log(sum) - hl[n * Vp + targets[n]], 1e-12) << "row " << n;
  }
  auto dlogits = from_host(hl);
  crossentropy_backward<D>(M(dlogits, N, Vp), V(lse), tgt, nv, scale);
  const auto g = to_host(dlogits);
  EXPECT_LE(gradcheck(logits, g, loss, h), 1.0);
  for (int n = 0; n < N; ++n) {
    if (targets[n] >= 0) continue;
    for (int j = 0; j < Vp; ++j) EXPECT_EQ(g[n * Vp + j], 0.0) << "masked row " << n << " column " << j;
  }
  // The fused kernel (training's), in place and into another buffer: the same losses and gradient.
  auto fused = from_host(hl);
  Buffer<D> fused_losses("fused_losses", N), d3("d3", N * Vp);
  crossentropy_fused<D>(V(fused_losses), M(fused, N, Vp), tgt, nv, scale);
  const auto fl = to_host(fused_losses), fg = to_host(fused);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(fl[n], hloss[n], 1e-13);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(fg[i], g[i], 1e-15);
  auto fused3 = from_host(hl);
  crossentropy_fused<D>(V(fused_losses), M(fused3, N, Vp), tgt, nv, scale, M(d3, N, Vp));
  EXPECT_EQ(to_host(d3), fg);
}

TEST(Kernels, AdamWMatchesReference) {
  const int n = 20;
  auto p = random_buffer<D>(n, 1), g = random_buffer<D>(n, 2);
  auto m = random_buffer<D>(n, 3, 0.1), v = random_buffer<D>(n, 4, 0.1);
  square_in_place(v);
  auto hp = to_host(p), hg = to_host(g), hm = to_host(m), hv = to_host(v);
  AdamWStep s;
  s.lr = 1e-2, s.beta1 = 0.8, s.beta2 = 0.9, s.eps = 1e-6, s.weight_decay = 0.1, s.grad_scale = 0.5,
  s.step = 3;
  adamw_update<D>(V(p), V(g), V(m), V(v), s);
  auto np = to_host(p), nm = to_host(m), nv = to_host(v);
  for (int i = 0; i < n; ++i) {
    // PyTorch AdamW: decay first, then the Adam step with bias corrections
    const double gi = hg[i] * 0.5;
    const double mi = 0.8 * hm[i] + 0.2 * gi, vi = 0.9 * hv[i] + 0.1 * gi * gi;
    double pi = hp[i] * (1 - 1e-2 * 0.1);
    pi -= 1e-2 / (1 - std::pow(0.8, 3)) * mi / (std::sqrt(vi) / std::sqrt(1 - std::pow(0.9, 3)) + 1e-6);
    EXPECT_NEAR(nm[i], mi, 1e-14);
    EXPECT_NEAR(nv[i], vi, 1e-14);
    EXPECT_NEAR(np[i], pi, 1e-12);
  }
}

// zero_grads: the same update, and the gradients left 0 for the next step's accumulation.
TEST(Kernels, AdamWZeroesGradientsInTheSamePass) {
  const int n = 1000;
  auto g1 = random_buffer<D>(n, 2), g2 = random_buffer<D>(n, 2);
  auto p1 = random_buffer<D>(n, 1), p2 = random_buffer<D>(n, 1);
  auto m1 = random_buffer<D>(n, 3, 0.0), m2 = random_buffer<D>(n, 3, 0.0);
  auto v1 = random_buffer<D>(n, 4, 0.0), v2 = random_buffer<D>(n, 4, 0.0);
  AdamWStep s;
  s.lr = 1e-2, s.weight_decay = 0.1, s.step = 1;
  adamw_update<D>(V(p1), V(g1), V(m1), V(v1), s);
  s.zero_grads = true;
  adamw_update<D>(V(p2), V(g2), V(m2), V(v2), s);
  EXPECT_EQ(to_host(p1), to_host(p2));
  EXPECT_EQ(to_host(m1), to_host(m2));
  EXPECT_EQ(to_host(v1), to_host(v2));
  EXPECT_EQ(to_host(g2), std::vector<D>(n, 0.0));
  EXPECT_NE(to_host(g1), std::vector<D>(n, 0.0));
}

// A working copy: the same update, and the copy holds each new value rounded (bf16 and fp16).
TEST(Kernels, AdamWWritesTheWorkingCopyInTheSamePass) {
  const int n = 3000;
  for (Precision prec : {Precision::bf16, Precision::fp16}) {
    auto g = random_buffer<float>(n, 2), p1 = random_buffer<float>(n, 1), p2 = random_buffer<float>(n, 1);
    auto m1 = random_buffer<float>(n, 3, 0.0), m2 = random_buffer<float>(n, 3, 0.0);
    auto v1 = random_buffer<float>(n, 4, 0.0), v2 = random_buffer<float>(n, 4, 0.0);
    Buffer<uint16_t> bits("bits", n);
    AdamWStep s;
    s.lr = 1e-2, s.weight_decay = 0.1, s.step = 2;
    using VF = Vec<float>;
    adamw_update<float>(VF(p1.data(), n), VF(g.data(), n), VF(m1.data(), n), VF(v1.data(), n), s);
    adamw_update<float>(VF(p2.data(), n), VF(g.data(), n), VF(m2.data(), n), VF(v2.data(), n), s,
                        WorkingCopy{Vec<uint16_t>(bits.data(), n), prec});
    const auto hp = to_host(p2);
    const auto hb = to_host(bits);
    EXPECT_EQ(to_host(p1), hp);
    EXPECT_EQ(to_host(m1), to_host(m2));
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(hb[i], prec == Precision::bf16 ? half_bits::bf16_from_float(hp[i]) : half_bits::fp16_from_float(hp[i]))
          << precision_name(prec) << " " << i;
  }
}

TEST(Kernels, GradNormAndClipFactor) {
  auto g = random_buffer<D>(1000, 5);
  double ref = 0;
  for (double x : to_host(g)) ref += x * x;
  EXPECT_NEAR(sum_of_squares<D>(V(g)), ref, 1e-9);
  EXPECT_DOUBLE_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_NEAR(clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-15);
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 0.0), 1.0);  // clipping off
  // Into device memory: the same bits as the host result; an empty vector sums to 0.
  Buffer<double> out("out", 2);
  Kokkos::deep_copy(out, 7.0);
  sum_of_squares<D>(V(g), DeviceScalar(out.data()));
  sum_of<D>(CVec<D>(g.data(), 0), DeviceScalar(out.data() + 1));
  EXPECT_EQ(to_host(out)[0], sum_of_squares<D>(V(g)));
  EXPECT_EQ(to_host(out)[1], 0.0);
}

// AdamW clipping from a squared norm in device memory gives the bits of the host-computed factor.
TEST(Kernels, AdamWClipsFromDeviceNorm) {
  const int n = 50;
  auto g = random_buffer<D>(n, 6);
  for (double max_norm : {0.5, 100.0, 0.0}) {  // clipped, not clipped, clipping off
    auto p1 = random_buffer<D>(n, 7), p2 = random_buffer<D>(n, 7);
    auto m1 = random_buffer<D>(n, 8, 0.0), m2 = random_buffer<D>(n, 8, 0.0);
    auto v1 = random_buffer<D>(n, 9, 0.0), v2 = random_buffer<D>(n, 9, 0.0);
    Buffer<double> sumsq("sumsq", 1);
    sum_of_squares<D>(V(g), DeviceScalar(sumsq.data()));
    AdamWStep s;
    s.lr = 1e-2, s.weight_decay = 0.1, s.step = 2;
    s.grad_scale = clip_factor(std::sqrt(sum_of_squares<D>(V(g))), max_norm);
    adamw_update<D>(V(p1), V(g), V(m1), V(v1), s);
    s.grad_scale = GradScale::clip(sumsq.data(), max_norm);
    adamw_update<D>(V(p2), V(g), V(m2), V(v2), s);
    EXPECT_EQ(to_host(p1), to_host(p2)) << "max_norm " << max_norm;
    EXPECT_EQ(to_host(v1), to_host(v2)) << "max_norm " << max_norm;
  }
}

TEST(Kernels, FastExpAndTanhAreAccurate) {
  double worst_exp = 0, worst_tanh = 0;
  for (double x = -80; x <= 80; x += 0.001) {
    const float f = float(x);
    const double e = std::exp(double(f)), t = std::tanh(double(f));
    worst_exp = std::max(worst_exp, std::abs(km::fast_exp(f) - e) / e);
    worst_tanh = std::max(worst_tanh, std::abs(km::fast_tanh(f) - t));
  }
  EXPECT_LT(worst_exp, 3e-7);   // ~2.5 ulp of float
  EXPECT_LT(worst_tanh, 3e-7);
  EXPECT_EQ(km::fast_exp(-200.0f) < 1e-37f, true);
}

// fast_tanh's clamp to +-9 is what keeps exp_in_range's argument in range (it has no clamp of its
// own): far outside it tanh is its value at +-9 (within an ulp of +-1), and NaN stays NaN.
TEST(Kernels, FastTanhSaturatesFarOutside) {
  const float top = km::fast_tanh(9.0f), bottom = km::fast_tanh(-9.0f);
  EXPECT_NEAR(top, 1.0f, 1e-7f);
  EXPECT_NEAR(bottom, -1.0f, 1e-7f);
  for (const float x : {20.0f, 44.5f, 50.0f, 100.0f, 1e30f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(km::fast_tanh(x), top) << x;
    EXPECT_EQ(km::fast_tanh(-x), bottom) << -x;
  }
  EXPECT_TRUE(std::isnan(km::fast_tanh(std::numeric_limits<float>::quiet_NaN())));
  for (float x = -9.0f; x <= 9.0f; x += 0.01f)  // inside the clamp: the clamped exp's value
    EXPECT_EQ(km::fast_tanh(x), 1.0f - 2.0f / (km::fast_exp(2.0f * x) + 1.0f)) << x;
}

// GPT2_TEAM_SIZE sets the threads of every team kernel's teams (clamped to the threads there are):
// the teams the tests with it run are really that size.
namespace {
Kokkos::View<int*, MemSpace> team_sizes(int league) {  // (device lambdas may not sit in a TEST body)
  Kokkos::View<int*, MemSpace> sizes("sizes", league);
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "team_sizes", team_policy<ExecSpace>(league), KOKKOS_LAMBDA(const Member& team) {
        Kokkos::single(Kokkos::PerTeam(team), [&]() { sizes(team.league_rank()) = team.team_size(); });
      });
  return sizes;
}
}  // namespace

TEST(Kernels, TeamPolicyTakesTheTeamSizeAsked) {
  const char* e = std::getenv("GPT2_TEAM_SIZE");
  const int asked = e ? std::atoi(e) : 0;
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), team_sizes(3));
  const int want = asked > 1 ? std::min(asked, ExecSpace().concurrency()) : -1;
  for (int i = 0; i < 3; ++i) {
    if (want > 1) {
      EXPECT_EQ(h(i), want);
    } else {
      EXPECT_GE(h(i), 1);
    }
  }
}

// team_sum and team_max over rows of every length class: below, at and above the 8- and 32-lane
// loops' groups and the long-row switch, so a lane, a group or the rest left out shows. Row r is
// lens[r] values; its maximum sits at a position that moves from row to row (first, in the lanes,
// in the rest, last), and one row's maximum is the first value alone.
namespace {
std::pair<std::vector<double>, std::vector<double>> team_sums_and_maxes(const Buffer<D>& x, const std::vector<int>& lens,
                                                                        int stride) {
  const int rows = int(lens.size());
  Buffer<int> n = from_host(lens);
  Buffer<D> sums("sums", size_t(rows)), maxes("maxes", size_t(rows));
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "team_reductions", team_policy<ExecSpace>(rows), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), len = n(r);
        const D* row = x.data() + size_t(r) * stride;
        const D sum = team_sum<D>(team, len, [&](int j) { return row[j]; });
        const D mx = team_max<D>(team, len, [&](int j) { return row[j]; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { sums(r) = sum, maxes(r) = mx; });
      });
  return {to_host(sums), to_host(maxes)};
}
}  // namespace

TEST(Kernels, TeamSumAndMaxCoverEveryValue) {
  const std::vector<int> lens = {1, 7, 8, 9, 31, 33, 127, 128, 129, 160, 1000, 4099};
  const int stride = 4099;
  std::vector<double> x = random_vector(lens.size() * stride, 17);
  for (size_t r = 0; r < lens.size(); ++r) {  // the maximum: 10 + r, at a position that moves
    const int len = lens[r];
    const int at = r % 4 == 0 ? 0 : r % 4 == 1 ? len / 2 : r % 4 == 2 ? len - 1 - (len % 8) / 2 : len - 1;
    x[r * stride + size_t(at)] = 10.0 + double(r);
  }
  const auto [sums, maxes] = team_sums_and_maxes(from_host(x), lens, stride);
  for (size_t r = 0; r < lens.size(); ++r) {
    double ref = 0;
    for (int j = 0; j < lens[r]; ++j) ref += x[r * stride + size_t(j)];
    EXPECT_NEAR(sums[r], ref, 1e-12 * lens[r]) << "row of " << lens[r];
    EXPECT_EQ(maxes[r], 10.0 + double(r)) << "row of " << lens[r];
  }
}

// for_each_index over lengths around its host runs (8192 indices): every index visited once,
// whichever thread takes which run (a run left out shows as 0, one done twice as 2).
namespace {
std::vector<int> visits(int64_t n) {
  Buffer<int> count("count", size_t(n));
  for_each_index("visits", n, KOKKOS_LAMBDA(int64_t i) { count(i) += 1; });
  return to_host(count);
}
}  // namespace

TEST(Kernels, ForEachIndexVisitsEachIndexOnce) {
  for (const int64_t n : {int64_t(1), int64_t(8191), int64_t(8192), int64_t(8193), int64_t(5 * 8192 + 17),
                          int64_t(100003)}) {
    const std::vector<int> c = visits(n);
    const auto wrong = std::find_if(c.begin(), c.end(), [](int v) { return v != 1; });
    EXPECT_TRUE(wrong == c.end()) << "n " << n << ": index " << (wrong - c.begin()) << " visited "
                                  << (wrong == c.end() ? 1 : *wrong) << " times";
  }
}

// Column sums (bias, LayerNorm parameter gradients) add each column's rows in fixed blocks, then
// the blocks in order: the same bits as that order computed here one value at a time, at any team
// size and thread count (the teams tests run this too). N = 1000: 16 blocks of 64 rows, the last
// one short; C = 37: a partial column block on the host.
namespace {
// column_sum's teams and column_sum_by_blocks over d's columns, from `start`: a plain sum, or a
// product of two columns (device lambdas may not sit in a TEST body).
std::pair<std::vector<float>, std::vector<float>> both_column_sums(CMat<float> d, const std::vector<float>& start,
                                                                   bool product) {
  const int N = int(d.extent(0)), C = int(d.extent(1));
  const auto f = KOKKOS_LAMBDA(int n, int c) { return product ? d(n, c) * d(n, (c + 1) % C) * 0.75f : d(n, c); };
  Buffer<float> teams = from_host(start), flat = from_host(start);
  column_sum<float>("teams", Vec<float>(teams.data(), C), N, C, f);
  column_sum_by_blocks<float>("flat", Vec<float>(flat.data(), C), N, C, f);
  return {to_host(teams), to_host(flat)};
}
}  // namespace

TEST(Kernels, ColumnSumsAddFixedRowBlocksInOrder) {
  const int N = 1000, C = 37;
  const std::vector<double> v = random_vector(size_t(N) * C, 91);
  const std::vector<float> x(v.begin(), v.end());
  const Buffer<float> dout = from_host(x);
  std::vector<float> start(C, 0.5f);
  Buffer<float> db = from_host(start);
  bias_backward<float>(Vec<float>(db.data(), C), CMat<float>(dout.data(), N, C));
  const std::vector<float> got = to_host(db);
  const int rows = column_sum_rows_per_block(N), blocks = column_sum_row_blocks(N);
  ASSERT_EQ(rows, 64);
  ASSERT_EQ(blocks, 16);
  for (int c = 0; c < C; ++c) {
    float total = 0;
    for (int r = 0; r < blocks; ++r) {
      float block = 0;
      for (int n = r * rows; n < std::min(N, (r + 1) * rows); ++n) block += x[size_t(n) * C + c];
      total += block;
    }
    EXPECT_EQ(got[size_t(c)], 0.5f + total) << "column " << c;
  }
  // The GPU's flat kernels (column_sum_by_blocks) add in the same order: the teams' bits for a plain
  // sum (the bias), and for a product (the LayerNorm weight's gradient: the compiler may contract it
  // into FMAs differently) the same to rounding; at a shape whose last row block is short too.
  for (const int rows : {N, 4 * 64 + 17}) {
    const CMat<float> d(dout.data(), rows, C);
    const auto [teams, flat] = both_column_sums(d, start, false);
    EXPECT_EQ(teams, flat) << rows << " rows";
    const auto [teams2, flat2] = both_column_sums(d, start, true);
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(teams2[size_t(c)], flat2[size_t(c)], 1e-5f * (1 + std::abs(teams2[size_t(c)]))) << c;
  }
}
