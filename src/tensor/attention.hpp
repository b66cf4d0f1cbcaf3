#pragma once
// Causal multi-head self-attention on a packed qkv (N,3C): q in columns [0,C), k in [C,2C), v in
// [2C,3C); head h uses columns [h*hs, (h+1)*hs) of each. Scores and their softmax are materialised
// (B, nh, T, T); the products per head are strided-batched GEMMs, the heads the batch and the
// sequences its groups (one call for all of them).
#include "tensor/gemm.hpp"
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

namespace detail {
// Row r of att (B*nh*T, T) belongs to query position t = r % T; it may see keys 0..t.
// In place: scaled scores in, probabilities out (zeros above the diagonal).
// With an offset (decoding with a KV cache: the T query rows are positions offset..offset+T-1 and
// att has offset + T columns) row r may see keys 0..offset + r % T.
template <class T>
void causal_softmax_rows(Mat<T> att, int Tn, int offset = 0) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int cols = att.extent(1);
  count_traffic(bytes_of(att), bytes_of(att));
  Kokkos::parallel_for(
      "attention_softmax", team_policy<ExecSpace>(att.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), len = offset + r % Tn + 1;
        const T mx = team_max<T>(team, len, [&](int j) { return att(r, j); });
        const T sum = team_sum<T>(team, len, [&](int j) {
          const T e = km::expf_(att(r, j) - mx);
          att(r, j) = e;
          return e;
        });
        const T inv = T(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols),
                             [&](int j) { att(r, j) = j < len ? att(r, j) * inv : T(0); });
      });
}

// In place: datt (gradient wrt probabilities) in, gradient wrt the scaled scores out.
template <class T>
void causal_softmax_rows_backward(Mat<T> datt, CMat<T> att, int Tn) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  count_traffic(bytes_of(datt, att), bytes_of(datt));
  Kokkos::parallel_for(
      "attention_softmax_backward", team_policy<ExecSpace>(att.extent(0)),
      KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), len = r % Tn + 1;
        const T dot = team_sum<T>(team, len, [&](int j) { return att(r, j) * datt(r, j); });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tn), [&](int j) {
          datt(r, j) = j < len ? att(r, j) * (datt(r, j) - dot) : T(0);
        });
      });
}
}  // namespace detail

// out (N,C) = softmax(q k^T / sqrt(hs), causal) v per head;   att (B*nh*T, T) saved for backward
template <class T>
void attention_forward(Mat<T> out, Mat<T> att, CMat<T> qkv, int B, int Tn, int nh) {
  const int C3 = qkv.extent(1), C = C3 / 3, hs = C / nh;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t TT = int64_t(Tn) * Tn, seq_qkv = int64_t(Tn) * C3, seq_att = nh * TT, seq_out = int64_t(Tn) * C;
  const T* q = qkv.data();
  gemm_strided_batched<T>(Op::N, Op::T, Tn, Tn, hs, scale, q, C3, hs, q + C, C3, hs, T(0), att.data(), Tn, TT, nh,
                          {B, seq_qkv, seq_qkv, seq_att});
  detail::causal_softmax_rows<T>(att, Tn);
  gemm_strided_batched<T>(Op::N, Op::N, Tn, hs, Tn, T(1), att.data(), Tn, TT, q + 2 * C, C3, hs, T(0), out.data(), C,
                          hs, nh, {B, seq_att, seq_qkv, seq_out});
}

// ---- Decoding with a key/value cache (no backward: generation only) --------------------------------
// kv (max_len, 2C) holds the keys (columns [0, C)) and values ([C, 2C)) of a sequence's positions so
// far. kv_cache_store writes those of n new rows (qkv (n, 3C)) at positions [p0, p0 + n).
template <class T>
void kv_cache_store(Mat<T> kv, CMat<T> qkv, int p0) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int C2 = kv.extent(1), C = C2 / 2;
  count_traffic(uint64_t(qkv.extent(0)) * C2 * sizeof(T), uint64_t(qkv.extent(0)) * C2 * sizeof(T));
  Kokkos::parallel_for(
      "kv_cache_store", team_policy<ExecSpace>(qkv.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int i = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C2), [&](int c) { kv(p0 + i, c) = qkv(i, C + c); });
      });
}

// out (n,C) = causal attention of the n new rows' queries (qkv (n,3C), columns [0, C)), at positions
// [p0, p0 + n), over the cached keys and values of positions [0, p0 + n) (kv_cache_store them
// first): rows p0..p0+n-1 of attention_forward's output for the sequence's first p0 + n rows.
// att (nh * n * (p0 + n)) is scratch.
template <class T>
void attention_forward_cached(Mat<T> out, Vec<T> att, CMat<T> qkv, CMat<T> kv, int p0, int nh) {
  const int n = qkv.extent(0), C3 = qkv.extent(1), C = C3 / 3, hs = C / nh, L = p0 + n;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t nL = int64_t(n) * L;
  gemm_strided_batched<T>(Op::N, Op::T, n, L, hs, scale, qkv.data(), C3, hs, kv.data(), 2 * C, hs, T(0), att.data(),
                          L, nL, nh);
  detail::causal_softmax_rows<T>(Mat<T>(att.data(), size_t(nh) * n, L), n, p0);
  gemm_strided_batched<T>(Op::N, Op::N, n, hs, L, T(1), att.data(), L, nL, kv.data() + C, 2 * C, hs, T(0), out.data(),
                          C, hs, nh);
}

// dqkv (N,3C) = gradient wrt qkv (overwritten);   datt (B*nh*T, T) is scratch
template <class T>
void attention_backward(Mat<T> dqkv, Mat<T> datt, CMat<T> dout, CMat<T> qkv, CMat<T> att, int B,
                        int Tn, int nh) {
  const int C3 = qkv.extent(1), C = C3 / 3, hs = C / nh;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t TT = int64_t(Tn) * Tn, seq_qkv = int64_t(Tn) * C3, seq_att = nh * TT, seq_out = int64_t(Tn) * C;
  const T* q = qkv.data();
  T* dq = dqkv.data();
  gemm_strided_batched<T>(Op::N, Op::T, Tn, Tn, hs, T(1), dout.data(), C, hs, q + 2 * C, C3, hs, T(0), datt.data(),
                          Tn, TT, nh, {B, seq_out, seq_qkv, seq_att});
  gemm_strided_batched<T>(Op::T, Op::N, Tn, hs, Tn, T(1), att.data(), Tn, TT, dout.data(), C, hs, T(0), dq + 2 * C,
                          C3, hs, nh, {B, seq_att, seq_out, seq_qkv});
  detail::causal_softmax_rows_backward<T>(datt, att, Tn);
  gemm_strided_batched<T>(Op::N, Op::N, Tn, hs, Tn, scale, datt.data(), Tn, TT, q + C, C3, hs, T(0), dq, C3, hs, nh,
                          {B, seq_att, seq_qkv, seq_qkv});
  gemm_strided_batched<T>(Op::T, Op::N, Tn, hs, Tn, scale, datt.data(), Tn, TT, q, C3, hs, T(0), dq + C, C3, hs, nh,
                          {B, seq_att, seq_qkv, seq_qkv});
}

}  // namespace gpt2
