// Fused attention (tensor/flash_attention.hpp) against the materialised one (tensor/attention.hpp):
// whole sequences in fp32 (1e-5) and double (1e-12) at tile sizes that leave partial tiles; context
// parallelism's ring with its cp ranks simulated in one process (each rank's queries against every
// rank's block in ring order, the keys' and values' gradients summed over the ranks that saw their
// block); document masks (a packed batch equals its examples run alone); central differences in
// double for the forward and both backward passes.
#include <cmath>

#include "tensor/attention.hpp"
#include "tensor/flash_attention.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
using D = double;

template <class X>
Mat<X> M(Buffer<X>& b, size_t r, size_t c) {
  return Mat<X>(b.data(), r, c);
}
template <class X>
Vec<X> V(Buffer<X>& b) {
  return Vec<X>(b.data(), b.extent(0));
}

template <class X>
std::vector<X> cast(const std::vector<D>& v) {
  return std::vector<X>(v.begin(), v.end());
}

// Whole-sequence attention of (B*T, 3C) qkv: y (B*T, C) and, given dy, dqkv (B*T, 3C). doc: each
// row's document start (empty: none); tile 0: the kernels' own choice.
template <class X>
void fused(const std::vector<D>& qkv, const std::vector<D>& dy, int B, int T, int nh, int C, int tile,
           const std::vector<int>& doc, std::vector<D>& y, std::vector<D>& dqkv) {
  const size_t N = size_t(B) * T;
  Buffer<X> q = from_host(cast<X>(qkv)), g = from_host(cast<X>(dy)), out("y", N * C), lse("lse", size_t(B) * nh * T),
            Dv("D", size_t(B) * nh * T), dq("dqkv", N * 3 * C);
  Kokkos::deep_copy(dq, X(7));  // (every value must be written)
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> docs("doc", doc.size());
  if (!doc.empty()) Kokkos::deep_copy(docs, Kokkos::View<const int*, Kokkos::HostSpace>(doc.data(), doc.size()));
  const int hs = C / nh;
  FlashProblem<X> p{M(q, N, 3 * C), M(q, N, 3 * C), C, 2 * C, AttnSpan::whole(T), AttnSpan::whole(T), DocStarts(docs),
                    B, nh, hs, tile > 0 ? tile : flash::tile_for<X>(hs, T)};
  flash_attention_forward<X>(p, M(out, N, C), Vec<X>(), Vec<X>(), V(lse), FlashPass{});
  flash_attention_row_dots<X>(V(Dv), M(g, N, C), M(out, N, C), T, nh);
  flash_attention_backward_dq<X>(p, M(dq, N, 3 * C), M(g, N, C), V(lse), V(Dv), false);
  flash_attention_backward_dkv<X>(p, M(dq, N, 3 * C), M(g, N, C), V(lse), V(Dv), false);
  const std::vector<X> yh = to_host(out), gh = to_host(dq);
  y.assign(yh.begin(), yh.end());
  dqkv.assign(gh.begin(), gh.end());
}

template <class X>
void materialized(const std::vector<D>& qkv, const std::vector<D>& dy, int B, int T, int nh, int C,
                  std::vector<D>& y, std::vector<D>& dqkv) {
  const size_t N = size_t(B) * T, rows = size_t(B) * nh * T;
  Buffer<X> q = from_host(cast<X>(qkv)), g = from_host(cast<X>(dy)), out("y", N * C), att("att", rows * T),
            datt("datt", rows * T), dq("dqkv", N * 3 * C);
  attention_forward<X>(M(out, N, C), M(att, rows, T), M(q, N, 3 * C), B, T, nh);
  attention_backward<X>(M(dq, N, 3 * C), M(datt, rows, T), M(g, N, C), M(q, N, 3 * C), M(att, rows, T), B, T, nh);
  const std::vector<X> yh = to_host(out), gh = to_host(dq);
  y.assign(yh.begin(), yh.end());
  dqkv.assign(gh.begin(), gh.end());
}

double worst_difference(const std::vector<D>& a, const std::vector<D>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Context parallelism over cp ranks, simulated: rank i holds chunks i and 2cp-1-i of L = T / 2cp.
struct Ring {
  int B, T, nh, C, cp, tile;
  int L() const { return T / (2 * cp); }
  int rows() const { return B * 2 * L(); }  // a rank's rows
  int position(int i, int j) const { return j < L() ? i * L() + j : (2 * cp - 1 - i) * L() + (j - L()); }
  // Rank i's rows of a (B*T, W) host matrix; and its (rows, loc_W) matrix's columns added back.
  std::vector<D> local(const std::vector<D>& full, int W, int i) const {
    std::vector<D> out(size_t(rows()) * W);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 2 * L(); ++j)
        for (int w = 0; w < W; ++w)
          out[(size_t(b) * 2 * L() + j) * W + w] = full[(size_t(b) * T + position(i, j)) * W + w];
    return out;
  }
  void add_to_full(std::vector<D>& full, const std::vector<D>& loc, int W, int i, int col0, int cols, int loc_W) const {
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 2 * L(); ++j)
        for (int w = 0; w < cols; ++w)
          full[(size_t(b) * T + position(i, j)) * W + col0 + w] += loc[(size_t(b) * 2 * L() + j) * loc_W + w];
  }
};

// Every rank's output (B*T, C in global row order) and, given dy, the gradient wrt qkv (B*T, 3C),
// each block's keys' and values' gradient accumulated as it goes round the ring.
void ring_attention(const Ring& g, const std::vector<D>& qkv, const std::vector<D>& dy, std::vector<D>& y_full,
                    std::vector<D>& dqkv_full) {
  const int C = g.C, L = g.L(), R = g.rows(), nh = g.nh, c = g.cp;
  const size_t states = size_t(g.B) * nh * 2 * L;
  const size_t n = static_cast<size_t>(c);
  std::vector<Buffer<D>> q(n), kv(n), y(n), lse(n), dkv(n);
  for (int i = 0; i < c; ++i) {
    const std::vector<D> loc = g.local(qkv, 3 * C, i);
    q[size_t(i)] = from_host(loc);
    std::vector<D> k(size_t(R) * 2 * C);
    for (int r = 0; r < R; ++r)
      for (int col = 0; col < 2 * C; ++col) k[size_t(r) * 2 * C + col] = loc[size_t(r) * 3 * C + C + col];
    kv[size_t(i)] = from_host(k);
    dkv[size_t(i)] = Buffer<D>("dkv", size_t(R) * 2 * C);
    y[size_t(i)] = Buffer<D>("y", size_t(R) * C);
    lse[size_t(i)] = Buffer<D>("lse", states);
  }
  Buffer<D> m("m", states), l("l", states), Dv("D", states);
  auto problem = [&](int i, int s) {
    const int src = (i - s + c) % c;
    return FlashProblem<D>{M(q[size_t(i)], R, 3 * C), M(kv[size_t(src)], R, 2 * C), 0, C, AttnSpan::ring(L, c, i),
                           AttnSpan::ring(L, c, src), DocStarts(), g.B, nh, C / nh, g.tile};
  };
  y_full.assign(size_t(g.B) * g.T * C, 0);
  dqkv_full.assign(size_t(g.B) * g.T * 3 * C, 0);
  for (int i = 0; i < c; ++i) {
    for (int s = 0; s < c; ++s)
      flash_attention_forward<D>(problem(i, s), M(y[size_t(i)], R, C), V(m), V(l), V(lse[size_t(i)]),
                                 FlashPass{s == 0, s == c - 1});
    g.add_to_full(y_full, to_host(y[size_t(i)]), C, i, 0, C, C);
  }
  for (int i = 0; i < c; ++i) {
    Buffer<D> dyl = from_host(g.local(dy, C, i)), dq("dq", size_t(R) * 3 * C);
    flash_attention_row_dots<D>(V(Dv), M(dyl, R, C), M(y[size_t(i)], R, C), 2 * L, nh);
    for (int s = 0; s < c; ++s) {
      const int src = (i - s + c) % c;
      flash_attention_backward_dq<D>(problem(i, s), M(dq, R, 3 * C), M(dyl, R, C), V(lse[size_t(i)]), V(Dv), s > 0);
      flash_attention_backward_dkv<D>(problem(i, s), M(dkv[size_t(src)], R, 2 * C), M(dyl, R, C), V(lse[size_t(i)]),
                                      V(Dv), true);
    }
    g.add_to_full(dqkv_full, to_host(dq), 3 * C, i, 0, C, 3 * C);
  }
  for (int i = 0; i < c; ++i) g.add_to_full(dqkv_full, to_host(dkv[size_t(i)]), 3 * C, i, C, 2 * C, 2 * C);
}

std::vector<int> doc_starts(int B, int T, const std::vector<std::vector<int>>& starts) {
  std::vector<int> out(size_t(B) * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      int s = 0;
      for (int x : starts[size_t(b)])
        if (x <= t) s = x;
      out[size_t(b) * T + t] = s;
    }
  return out;
}
}  // namespace

// Whole sequences: the fused kernels equal the materialised ones, at tiles that divide T, leave a
// partial last tile, or exceed T (every value of dqkv written, none left from before).
TEST(FlashAttention, EqualsMaterializedAttention) {
  struct Case {
    int B, T, nh, C, tile;
  };
  for (const Case k : {Case{2, 16, 2, 16, 32}, Case{1, 70, 2, 32, 32}, Case{2, 37, 3, 24, 64}, Case{1, 1, 1, 8, 32},
                       Case{1, 130, 1, 16, 0}, Case{1, 100, 2, 128, 32}}) {
    const size_t N = size_t(k.B) * k.T;
    const std::vector<D> qkv = random_vector(N * 3 * k.C, 11), dy = random_vector(N * k.C, 12);
    std::vector<D> yf, gf, ym, gm;
    fused<D>(qkv, dy, k.B, k.T, k.nh, k.C, k.tile, {}, yf, gf);
    materialized<D>(qkv, dy, k.B, k.T, k.nh, k.C, ym, gm);
    EXPECT_LT(worst_difference(yf, ym), 1e-12) << "double, T " << k.T << " tile " << k.tile << ": outputs";
    EXPECT_LT(worst_difference(gf, gm), 1e-12) << "double, T " << k.T << " tile " << k.tile << ": gradients";
    fused<float>(qkv, dy, k.B, k.T, k.nh, k.C, k.tile, {}, yf, gf);
    materialized<float>(qkv, dy, k.B, k.T, k.nh, k.C, ym, gm);
    EXPECT_LT(worst_difference(yf, ym), 1e-5) << "fp32, T " << k.T << " tile " << k.tile << ": outputs";
    EXPECT_LT(worst_difference(gf, gm), 1e-5) << "fp32, T " << k.T << " tile " << k.tile << ": gradients";
  }
}

TEST(FlashAttention, Gradcheck) {
  const int B = 2, T = 35, nh = 2, C = 8, tile = 32;
  const size_t N = size_t(B) * T;
  const std::vector<D> R = random_vector(N * C, 21);
  Buffer<D> x = random_buffer<D>(N * 3 * C, 22);
  const std::vector<int> doc = doc_starts(B, T, {{0, 5}, {0}});
  std::vector<D> y, dqkv;
  fused<D>(to_host(x), R, B, T, nh, C, tile, doc, y, dqkv);
  const double worst = gradcheck(x, dqkv, [&] {
    std::vector<D> yy, unused;
    fused<D>(to_host(x), R, B, T, nh, C, tile, doc, yy, unused);
    return dot(yy, R);
  });
  EXPECT_LE(worst, 1.0);
}

// Packed examples with a document mask: each example's rows of the output and of the gradient
// equal the example run alone (tiles that straddle a boundary, tiles wholly outside the mask).
TEST(FlashAttention, DocumentMaskedPackingEqualsExamplesAlone) {
  const int B = 2, T = 80, nh = 2, C = 8, tile = 32;
  const std::vector<std::vector<int>> starts = {{0, 7, 23, 35, 70}, {0, 3, 16, 40}};
  const size_t N = size_t(B) * T;
  const std::vector<D> qkv = random_vector(N * 3 * C, 31), dy = random_vector(N * C, 32);
  std::vector<D> y, g;
  fused<D>(qkv, dy, B, T, nh, C, tile, doc_starts(B, T, starts), y, g);
  for (int b = 0; b < B; ++b)
    for (size_t e = 0; e < starts[size_t(b)].size(); ++e) {
      const int s0 = starts[size_t(b)][e], s1 = e + 1 < starts[size_t(b)].size() ? starts[size_t(b)][e + 1] : T;
      const int n = s1 - s0;
      const size_t r0 = size_t(b) * T + s0;
      const std::vector<D> q(qkv.begin() + long(r0 * 3 * C), qkv.begin() + long((r0 + n) * 3 * C)),
          d(dy.begin() + long(r0 * C), dy.begin() + long((r0 + n) * C));
      std::vector<D> ya, ga;
      materialized<D>(q, d, 1, n, nh, C, ya, ga);
      const std::vector<D> yp(y.begin() + long(r0 * C), y.begin() + long((r0 + n) * C)),
          gp(g.begin() + long(r0 * 3 * C), g.begin() + long((r0 + n) * 3 * C));
      EXPECT_LT(worst_difference(yp, ya), 1e-12) << "sequence " << b << ", example " << e << ": outputs";
      EXPECT_LT(worst_difference(gp, ga), 1e-12) << "sequence " << b << ", example " << e << ": gradients";
    }
}

TEST(FlashAttention, EveryRingRankSeesWhatTheWholeSequenceAttentionDoes) {
  for (const Ring g : {Ring{2, 12, 2, 6, 1, 32}, Ring{2, 12, 2, 6, 2, 32}, Ring{2, 12, 2, 6, 3, 64},
                       Ring{1, 160, 2, 8, 2, 32}, Ring{1, 192, 1, 8, 3, 32}}) {
    const int N = g.B * g.T;
    const std::vector<D> qkv = random_vector(size_t(N) * 3 * g.C, 3), dy = random_vector(size_t(N) * g.C, 4);
    std::vector<D> y, dqkv, yw, gw;
    ring_attention(g, qkv, dy, y, dqkv);
    materialized<D>(qkv, dy, g.B, g.T, g.nh, g.C, yw, gw);
    EXPECT_LT(worst_difference(y, yw), 1e-12) << "cp " << g.cp << " tile " << g.tile << ": outputs";
    EXPECT_LT(worst_difference(dqkv, gw), 1e-12) << "cp " << g.cp << " tile " << g.tile << ": gradients";
  }
}

// A tile narrower than a register tile (flash::kCols: 32 with AVX-512, else 16) would leave its
// scores uncomputed; the kernels refuse it by name instead.
TEST(FlashAttention, RefusesATileNarrowerThanARegisterTile) {
  const int B = 1, T = 16, nh = 1, C = 8;
  const std::vector<D> qkv = random_vector(size_t(T) * 3 * C, 21), dy = random_vector(size_t(T) * C, 22);
  std::vector<D> y, g;
  for (const int tile : {flash::kCols / 2, flash::kCols + 8}) {
    try {
      fused<D>(qkv, dy, B, T, nh, C, tile, {}, y, g);
      ADD_FAILURE() << "a tile of " << tile << " rows was taken";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("expected a positive multiple of " + std::to_string(flash::kCols)),
                std::string::npos)
          << e.what();
    }
  }
}

// The key pass's rows that see a key: the first row whose document starts after the key's position,
// found by binary search, equals the linear scan over every start list of a few rows (rising starts,
// ties, none after, and a first row past the tile).
TEST(FlashAttention, FirstRowAfterAPositionEqualsTheScan) {
  for (int n = 0; n <= 6; ++n)
    for (int mask = 0; mask < (1 << n); ++mask) {
      std::vector<float> lo(size_t(n) + 1);
      for (int i = 0, start = 0; i < n; ++i) lo[size_t(i)] = float(start += (mask >> i) & 1 ? 2 : 0);
      for (int i0 = 0; i0 <= n + 1; ++i0)
        for (int pos = -1; pos <= 2 * n + 1; ++pos) {
          int scan = i0;
          while (scan < n && lo[size_t(scan)] <= float(pos)) ++scan;
          EXPECT_EQ(flash::first_row_after(lo.data(), i0, n, float(pos)), scan)
              << "n " << n << " starts mask " << mask << " i0 " << i0 << " pos " << pos;
        }
    }
}
