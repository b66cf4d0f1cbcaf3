#pragma once
// Causal attention of a rank's queries against one block of keys and values at a time, for context
// parallelism's ring attention (model/stage.cpp moves the blocks). A sequence of T tokens is cut
// into 2cp chunks of L = T / 2cp; a rank holds two of them, local rows [0, L) and [L, 2L) of each
// sequence, which are the global chunks `chunk[0]` and `chunk[1]`. Query chunk a sees key chunk b
// whole when b < a, its own causal triangle when b == a, nothing when b > a -- so one pair is a
// plain (L x L) attention tile, and the rank's queries against any block of two chunks are four
// tiles at most.
//
// Forward: an online softmax over the blocks (running max m and sum l per query row and head, the
// output O accumulated unnormalised), then y = O / l and the log-sum-exp m + log l kept for the
// backward, which recomputes each tile's probabilities from it (nothing T x T is kept) and passes
// the keys' and values' gradients on with their block.
//
// Shapes, per tensor-parallel rank (C' = C / tp, hs = C' / nh): qkv (B*2L, 3C'); a block kv (B*2L,
// 2C') = [k | v]; y, O (B*2L, C'); m, l, lse, D (B*nh*2L), index (b*nh + h)*2L + row; tile scratch
// S, P (nh*L*L).
#include "tensor/gemm.hpp"
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

struct RingTile {
  int q_chunk, k_chunk;  // local chunk (0, 1) of the queries and of the block's keys
  bool diagonal;         // the same global chunk: causal within it
};

// The tiles the rank's queries (global chunks q0, q1) have with a block of global chunks k0, k1.
inline int ring_tiles(int q0, int q1, int k0, int k1, RingTile out[4]) {
  int n = 0;
  const int q[2] = {q0, q1}, k[2] = {k0, k1};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      if (k[b] <= q[a]) out[n++] = {a, b, k[b] == q[a]};
  return n;
}

namespace detail {
// Work item i over (rows x heads) of the rank's 2L-row sequences: its row, head and state index
// (the per-row-and-head vectors m, l, lse, D: (b*nh + h)*2L + t).
struct RowHead {
  int64_t row, state;
  int h;
};
KOKKOS_INLINE_FUNCTION RowHead row_head(int64_t i, int nh, int Tl) {
  const int64_t row = i / nh;
  const int h = int(i % nh), b = int(row / Tl), t = int(row % Tl);
  return {row, (int64_t(b) * nh + h) * Tl + t, h};
}
}  // namespace detail

// m = a very negative number, l = 0, O = 0: the state before the first block.
template <class T>
void ring_attention_begin(Mat<T> O, Vec<T> m, Vec<T> l) {
  Kokkos::deep_copy(ExecSpace(), O, T(0));
  Kokkos::deep_copy(ExecSpace(), m, T(-1e30));
  Kokkos::deep_copy(ExecSpace(), l, T(0));
}

// One tile of sequence b: S = scale q_a k_b^T (nh tiles of L x L), merged into (m, l, O).
template <class T>
void ring_attention_tile_forward(Mat<T> O, Vec<T> m, Vec<T> l, CMat<T> qkv, CMat<T> kv, Mat<T> S, int b, int L, int nh,
                                 RingTile tile) {
  const int C3 = qkv.extent(1), C = C3 / 3, hs = C / nh, ldkv = kv.extent(1), Tl = 2 * L;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t LL = int64_t(L) * L;
  const T* q = qkv.data() + (int64_t(b) * Tl + tile.q_chunk * L) * C3;
  const T* k = kv.data() + (int64_t(b) * Tl + tile.k_chunk * L) * ldkv;
  gemm_strided_batched<T>(Op::N, Op::T, L, L, hs, scale, q, C3, hs, k, ldkv, hs, T(0), S.data(), L, LL, nh);
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const bool diag = tile.diagonal;
  const int qc = tile.q_chunk;
  Kokkos::parallel_for(
      "ring_attention_merge", team_policy<ExecSpace>(int64_t(nh) * L), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), h = r / L, i = r % L, len = diag ? i + 1 : L;
        const int64_t st = (int64_t(b) * nh + h) * Tl + qc * L + i;  // state index
        const int64_t row = int64_t(b) * Tl + qc * L + i;            // O's row
        const T tile_max = team_max<T>(team, len, [&](int j) { return S(r, j); });
        const T mx = tile_max > m(st) ? tile_max : m(st);
        const T sum = team_sum<T>(team, L, [&](int j) {
          const T p = j < len ? km::expf_(S(r, j) - mx) : T(0);
          S(r, j) = p;
          return p;
        });
        const T corr = km::expf_(m(st) - mx);  // (0 on the first block: l and O are 0 there)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hs), [&](int d) { O(row, h * hs + d) *= corr; });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          l(st) = l(st) * corr + sum;
          m(st) = mx;
        });
      });
  // O_a += P v_b
  const T* v = k + C;
  T* o = O.data() + (int64_t(b) * Tl + qc * L) * C;
  gemm_strided_batched<T>(Op::N, Op::N, L, hs, L, T(1), S.data(), L, LL, v, ldkv, hs, T(1), o, C, hs, nh);
}

// y = O / l, lse = m + log l.
template <class T>
void ring_attention_end(Mat<T> y, Vec<T> lse, CMat<T> O, CVec<T> m, CVec<T> l, int L, int nh) {
  const int C = y.extent(1), hs = C / nh, Tl = 2 * L;
  const int64_t rows = y.extent(0);
  Kokkos::parallel_for(
      "ring_attention_end", IndexRange(0, rows * nh), KOKKOS_LAMBDA(int64_t i) {
        const detail::RowHead r = detail::row_head(i, nh, Tl);
        const T inv = T(1) / l(r.state);
        for (int d = 0; d < hs; ++d) y(r.row, r.h * hs + d) = O(r.row, r.h * hs + d) * inv;
        lse(r.state) = m(r.state) + km::log(l(r.state));
      });
}

// D = rowsum(dy * y) per row and head (the softmax backward's correction term).
template <class T>
void ring_attention_backward_begin(Vec<T> D, CMat<T> dy, CMat<T> y, int L, int nh) {
  const int C = y.extent(1), hs = C / nh, Tl = 2 * L;
  const int64_t rows = y.extent(0);
  Kokkos::parallel_for(
      "ring_attention_dot", IndexRange(0, rows * nh), KOKKOS_LAMBDA(int64_t i) {
        const detail::RowHead r = detail::row_head(i, nh, Tl);
        T s = 0;
        for (int d = 0; d < hs; ++d) s += dy(r.row, r.h * hs + d) * y(r.row, r.h * hs + d);
        D(r.state) = s;
      });
}

// One tile of sequence b, backward: P = exp(S - lse) (recomputed), dP = dy_a v_b^T,
// dS = P (dP - D); dq_a += scale dS k_b (into dqkv's q columns), dk_b += scale dS^T q_a and
// dv_b += P^T dy_a (into the block's gradients dkv, laid out like kv).
template <class T>
void ring_attention_tile_backward(Mat<T> dqkv, Mat<T> dkv, CMat<T> qkv, CMat<T> kv, CMat<T> dy, CVec<T> lse, CVec<T> D,
                                  Mat<T> S, Mat<T> P, int b, int L, int nh, RingTile tile) {
  const int C3 = qkv.extent(1), C = C3 / 3, hs = C / nh, ldkv = kv.extent(1), Tl = 2 * L;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t LL = int64_t(L) * L;
  const int64_t qrow = int64_t(b) * Tl + tile.q_chunk * L, krow = int64_t(b) * Tl + tile.k_chunk * L;
  const T* q = qkv.data() + qrow * C3;
  const T* k = kv.data() + krow * ldkv;
  const T* v = k + C;
  const T* g = dy.data() + qrow * C;
  gemm_strided_batched<T>(Op::N, Op::T, L, L, hs, scale, q, C3, hs, k, ldkv, hs, T(0), S.data(), L, LL, nh);
  gemm_strided_batched<T>(Op::N, Op::T, L, L, hs, T(1), g, C, hs, v, ldkv, hs, T(0), P.data(), L, LL, nh);
  const bool diag = tile.diagonal;
  const int qc = tile.q_chunk;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  // A team a row and head: the row's state read once, no index division per score.
  Kokkos::parallel_for(
      "ring_attention_tile_grad", team_policy<ExecSpace>(int64_t(nh) * L), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), h = r / L, i = r % L, len = diag ? i + 1 : L;
        const int64_t st = (int64_t(b) * nh + h) * Tl + qc * L + i;
        const T lse_r = lse(st), D_r = D(st);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, L), [&](int j) {
          const T p = j < len ? km::expf_(S(r, j) - lse_r) : T(0);
          S(r, j) = p;                    // P
          P(r, j) = p * (P(r, j) - D_r);  // dS (from dP)
        });
      });
  // dv_b += P^T dy_a; dq_a += scale dS k_b; dk_b += scale dS^T q_a
  gemm_strided_batched<T>(Op::T, Op::N, L, hs, L, T(1), S.data(), L, LL, g, C, hs, T(1), dkv.data() + krow * ldkv + C,
                          ldkv, hs, nh);
  gemm_strided_batched<T>(Op::N, Op::N, L, hs, L, scale, P.data(), L, LL, k, ldkv, hs, T(1), dqkv.data() + qrow * C3, C3,
                          hs, nh);
  gemm_strided_batched<T>(Op::T, Op::N, L, hs, L, scale, P.data(), L, LL, q, C3, hs, T(1), dkv.data() + krow * ldkv,
                          ldkv, hs, nh);
}

}  // namespace gpt2
