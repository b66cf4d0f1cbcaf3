#pragma once
// Causal multi-head self-attention on a packed qkv (N,3C): q in columns [0,C), k in [C,2C), v in
// [2C,3C); head h uses columns [h*hs, (h+1)*hs) of each. Scores and their softmax are materialised
// (B, nh, T, T); the four products per head are strided-batched GEMMs (one call per sequence).
#include "tensor/gemm.hpp"
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

namespace detail {
// Row r of att (B*nh*T, T) belongs to query position t = r % T; it may see keys 0..t.
// In place: scaled scores in, probabilities out (zeros above the diagonal).
template <class T>
void causal_softmax_rows(Mat<T> att, int Tn) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  Kokkos::parallel_for(
      "attention_softmax", team_policy<ExecSpace>(att.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), len = r % Tn + 1;
        T mx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, len),
            [&](int j, T& m) { m = att(r, j) > m ? att(r, j) : m; }, Kokkos::Max<T>(mx));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, len),
            [&](int j, T& s) {
              const T e = km::expf_(att(r, j) - mx);
              att(r, j) = e;
              s += e;
            },
            sum);
        const T inv = T(1) / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tn),
                             [&](int j) { att(r, j) = j < len ? att(r, j) * inv : T(0); });
      });
}

// In place: datt (gradient wrt probabilities) in, gradient wrt the scaled scores out.
template <class T>
void causal_softmax_rows_backward(Mat<T> datt, CMat<T> att, int Tn) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  Kokkos::parallel_for(
      "attention_softmax_backward", team_policy<ExecSpace>(att.extent(0)),
      KOKKOS_LAMBDA(const Member& team) {
        const int r = team.league_rank(), len = r % Tn + 1;
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, len), [&](int j, T& s) { s += att(r, j) * datt(r, j); },
            dot);
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
  const int64_t TT = int64_t(Tn) * Tn;
  for (int b = 0; b < B; ++b) {
    const T* q = qkv.data() + int64_t(b) * Tn * C3;
    gemm_strided_batched<T>(Op::N, Op::T, Tn, Tn, hs, scale, q, C3, hs, q + C, C3, hs, T(0),
                            att.data() + b * nh * TT, Tn, TT, nh);
  }
  detail::causal_softmax_rows<T>(att, Tn);
  for (int b = 0; b < B; ++b) {
    const T* v = qkv.data() + int64_t(b) * Tn * C3 + 2 * C;
    gemm_strided_batched<T>(Op::N, Op::N, Tn, hs, Tn, T(1), att.data() + b * nh * TT, Tn, TT, v,
                            C3, hs, T(0), out.data() + int64_t(b) * Tn * C, C, hs, nh);
  }
}

// dqkv (N,3C) = gradient wrt qkv (overwritten);   datt (B*nh*T, T) is scratch
template <class T>
void attention_backward(Mat<T> dqkv, Mat<T> datt, CMat<T> dout, CMat<T> qkv, CMat<T> att, int B,
                        int Tn, int nh) {
  const int C3 = qkv.extent(1), C = C3 / 3, hs = C / nh;
  const T scale = T(1) / std::sqrt(T(hs));
  const int64_t TT = int64_t(Tn) * Tn;
  for (int b = 0; b < B; ++b) {
    const int64_t row = int64_t(b) * Tn;
    const T* q = qkv.data() + row * C3;
    const T* v = q + 2 * C;
    const T* dy = dout.data() + row * C;
    const T* a = att.data() + b * nh * TT;
    T* da = datt.data() + b * nh * TT;
    T* dv = dqkv.data() + row * C3 + 2 * C;
    gemm_strided_batched<T>(Op::N, Op::T, Tn, Tn, hs, T(1), dy, C, hs, v, C3, hs, T(0), da, Tn, TT,
                            nh);
    gemm_strided_batched<T>(Op::T, Op::N, Tn, hs, Tn, T(1), a, Tn, TT, dy, C, hs, T(0), dv, C3, hs,
                            nh);
  }
  detail::causal_softmax_rows_backward<T>(datt, att, Tn);
  for (int b = 0; b < B; ++b) {
    const int64_t row = int64_t(b) * Tn;
    const T* q = qkv.data() + row * C3;
    const T* da = datt.data() + b * nh * TT;
    T* dq = dqkv.data() + row * C3;
    gemm_strided_batched<T>(Op::N, Op::N, Tn, hs, Tn, scale, da, Tn, TT, q + C, C3, hs, T(0), dq,
                            C3, hs, nh);
    gemm_strided_batched<T>(Op::T, Op::N, Tn, hs, Tn, scale, da, Tn, TT, q, C3, hs, T(0), dq + C,
                            C3, hs, nh);
  }
}

}  // namespace gpt2
