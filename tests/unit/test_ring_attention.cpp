// Ring attention's kernels (tensor/ring_attention.hpp) in double, the cp ranks simulated in one
// process: each rank's queries (its chunks i and 2cp-1-i of every sequence) against every rank's
// key/value block, in ring order, give the rows of the whole-sequence causal attention (1e-12), and
// the backward -- the queries' gradients on their rank, the keys' and values' summed over the ranks
// that saw their block -- the whole-sequence attention's gradient (1e-12), which a central difference
// confirms.
#include <cmath>

#include "tensor/attention.hpp"
#include "tensor/ring_attention.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
using D = double;

Mat<D> M(Buffer<D>& b, size_t r, size_t c) { return Mat<D>(b.data(), r, c); }

struct Ring {
  int B, T, nh, C, cp;
  int L() const { return T / (2 * cp); }
  int rows() const { return B * 2 * L(); }  // a rank's rows
  // The global position of rank i's local row j of a sequence.
  int position(int i, int j) const { return j < L() ? i * L() + j : (2 * cp - 1 - i) * L() + (j - L()); }
  // Rank i's rows of a (B*T, W) host matrix, and back.
  std::vector<D> local(const std::vector<D>& full, int W, int i) const {
    std::vector<D> out(size_t(rows()) * W);
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 2 * L(); ++j)
        for (int w = 0; w < W; ++w)
          out[(size_t(b) * 2 * L() + j) * W + w] = full[(size_t(b) * T + position(i, j)) * W + w];
    return out;
  }
  void add_to_full(std::vector<D>& full, const std::vector<D>& loc, int W, int i, int col0, int cols, int loc_col0,
                   int loc_W) const {
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 2 * L(); ++j)
        for (int w = 0; w < cols; ++w)
          full[(size_t(b) * T + position(i, j)) * W + col0 + w] += loc[(size_t(b) * 2 * L() + j) * loc_W + loc_col0 + w];
  }
};

// f(src, b, tile) for each tile rank i's queries have with every rank's block, in ring order.
template <class F>
void for_each_tile(const Ring& g, int i, F&& f) {
  for (int s = 0; s < g.cp; ++s) {
    const int src = (i - s + g.cp) % g.cp;
    RingTile tiles[4];
    const int n = ring_tiles(i, 2 * g.cp - 1 - i, src, 2 * g.cp - 1 - src, tiles);
    for (int b = 0; b < g.B; ++b)
      for (int t = 0; t < n; ++t) f(src, b, tiles[t]);
  }
}

// Every rank's output (B*T, C in global row order) and, given dy, the gradient wrt qkv (B*T, 3C).
void ring_attention(const Ring& g, const std::vector<D>& qkv, const std::vector<D>& dy, std::vector<D>& y_full,
                    std::vector<D>& dqkv_full) {
  const int C = g.C, L = g.L(), R = g.rows(), nh = g.nh;
  std::vector<Buffer<D>> q(size_t(g.cp)), kv(size_t(g.cp)), y(size_t(g.cp)), lse(size_t(g.cp)), dkv(size_t(g.cp));
  for (int i = 0; i < g.cp; ++i) {
    const std::vector<D> loc = g.local(qkv, 3 * C, i);
    q[size_t(i)] = from_host(loc);
    std::vector<D> k(size_t(R) * 2 * C);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 2 * C; ++c) k[size_t(r) * 2 * C + c] = loc[size_t(r) * 3 * C + C + c];
    kv[size_t(i)] = from_host(k);
    dkv[size_t(i)] = Buffer<D>("dkv", size_t(R) * 2 * C);
  }
  Buffer<D> S("S", size_t(nh) * L * L), P("P", size_t(nh) * L * L), O("O", size_t(R) * C);
  Buffer<D> m("m", size_t(g.B) * nh * 2 * L), l("l", size_t(g.B) * nh * 2 * L), Dv("D", size_t(g.B) * nh * 2 * L);
  y_full.assign(size_t(g.B) * g.T * C, 0);
  dqkv_full.assign(size_t(g.B) * g.T * 3 * C, 0);
  for (int i = 0; i < g.cp; ++i) {
    y[size_t(i)] = Buffer<D>("y", size_t(R) * C);
    lse[size_t(i)] = Buffer<D>("lse", size_t(g.B) * nh * 2 * L);
    ring_attention_begin<D>(M(O, R, C), Vec<D>(m.data(), m.extent(0)), Vec<D>(l.data(), l.extent(0)));
    for_each_tile(g, i, [&](int src, int b, RingTile tile) {
      ring_attention_tile_forward<D>(M(O, R, C), Vec<D>(m.data(), m.extent(0)), Vec<D>(l.data(), l.extent(0)),
                                     M(q[size_t(i)], R, 3 * C), M(kv[size_t(src)], R, 2 * C), M(S, size_t(nh) * L, L), b,
                                     L, nh, tile);
    });
    ring_attention_end<D>(M(y[size_t(i)], R, C), Vec<D>(lse[size_t(i)].data(), lse[size_t(i)].extent(0)), M(O, R, C),
                          Vec<D>(m.data(), m.extent(0)), Vec<D>(l.data(), l.extent(0)), L, nh);
    g.add_to_full(y_full, to_host(y[size_t(i)]), C, i, 0, C, 0, C);
  }
  for (int i = 0; i < g.cp; ++i) {
    Buffer<D> dyl = from_host(g.local(dy, C, i)), dq("dq", size_t(R) * 3 * C);
    ring_attention_backward_begin<D>(Vec<D>(Dv.data(), Dv.extent(0)), M(dyl, R, C), M(y[size_t(i)], R, C), L, nh);
    for_each_tile(g, i, [&](int src, int b, RingTile tile) {
      ring_attention_tile_backward<D>(M(dq, R, 3 * C), M(dkv[size_t(src)], R, 2 * C), M(q[size_t(i)], R, 3 * C),
                                      M(kv[size_t(src)], R, 2 * C), M(dyl, R, C),
                                      Vec<D>(lse[size_t(i)].data(), lse[size_t(i)].extent(0)),
                                      Vec<D>(Dv.data(), Dv.extent(0)), M(S, size_t(nh) * L, L), M(P, size_t(nh) * L, L), b, L,
                                      nh, tile);
    });
    g.add_to_full(dqkv_full, to_host(dq), 3 * C, i, 0, C, 0, 3 * C);
  }
  for (int i = 0; i < g.cp; ++i) g.add_to_full(dqkv_full, to_host(dkv[size_t(i)]), 3 * C, i, C, 2 * C, 0, 2 * C);
}
}  // namespace

TEST(RingAttention, EveryRankSeesWhatTheWholeSequenceAttentionDoes) {
  for (int cp : {1, 2, 3}) {
    const Ring g{2, 12, 2, 6, cp};
    const int N = g.B * g.T, C = g.C, T = g.T, nh = g.nh, B = g.B;
    const std::vector<D> qkv = random_vector(size_t(N) * 3 * C, 3), dy = random_vector(size_t(N) * C, 4);
    std::vector<D> y, dqkv;
    ring_attention(g, qkv, dy, y, dqkv);
    Buffer<D> q = from_host(qkv), out("out", size_t(N) * C), att("att", size_t(B) * nh * T * T),
              datt("datt", size_t(B) * nh * T * T), dyb = from_host(dy), want("dqkv", size_t(N) * 3 * C);
    attention_forward<D>(M(out, N, C), M(att, size_t(B) * nh * T, T), M(q, N, 3 * C), B, T, nh);
    attention_backward<D>(M(want, N, 3 * C), M(datt, size_t(B) * nh * T, T), M(dyb, N, C), M(q, N, 3 * C),
                          M(att, size_t(B) * nh * T, T), B, T, nh);
    const std::vector<D> yw = to_host(out), gw = to_host(want);
    double worst_y = 0, worst_g = 0;
    for (size_t i = 0; i < y.size(); ++i) worst_y = std::max(worst_y, std::abs(y[i] - yw[i]));
    for (size_t i = 0; i < dqkv.size(); ++i) worst_g = std::max(worst_g, std::abs(dqkv[i] - gw[i]));
    EXPECT_LT(worst_y, 1e-12) << "cp " << cp << ": outputs";
    EXPECT_LT(worst_g, 1e-12) << "cp " << cp << ": gradients";
  }
}

TEST(RingAttention, Gradcheck) {
  const Ring g{1, 8, 2, 4, 2};
  const int N = g.B * g.T, C = g.C;
  std::vector<D> qkv = random_vector(size_t(N) * 3 * C, 5);
  const std::vector<D> R = random_vector(size_t(N) * C, 6);
  std::vector<D> y, dqkv;
  ring_attention(g, qkv, R, y, dqkv);
  double worst = 0;
  const double h = 1e-6;
  for (size_t k = 0; k < qkv.size(); ++k) {
    const double keep = qkv[k];
    std::vector<D> yp, ym, unused;
    qkv[k] = keep + h;
    ring_attention(g, qkv, R, yp, unused);
    qkv[k] = keep - h;
    ring_attention(g, qkv, R, ym, unused);
    qkv[k] = keep;
    double fd = 0;
    for (size_t i = 0; i < yp.size(); ++i) fd += (yp[i] - ym[i]) * R[i];
    fd /= 2 * h;
    worst = std::max(worst, std::abs(fd - dqkv[k]) / std::max(1.0, std::abs(fd)));
  }
  EXPECT_LT(worst, 1e-7);
}
