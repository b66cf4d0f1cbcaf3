#pragma once
// LayerNorm over the channel dimension, eps 1e-5, biased variance (as GPT-2 / PyTorch).
#include "tensor/column_sum.hpp"
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

constexpr double kLayerNormEps = 1e-5;

namespace detail {
// One row's LayerNorm by a team: out (C) = (in - mean) * rstd * w + b; mean and rstd saved.
template <class T, class S, class Member, class In>
KOKKOS_INLINE_FUNCTION void layernorm_row(const Member& team, int n, const In& in, S* out, T* mean, T* rstd,
                                          CVec<T> w, CVec<T> b, int C) {
  const T m = team_sum<T>(team, C, [&](int c) { return in(c); }) / C;
  const T var = team_sum<T>(team, C, [&](int c) {
    const T d = in(c) - m;
    return d * d;
  });
  const T s = T(1) / km::sqrt(var / C + T(kLayerNormEps));
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) { out[c] = S((in(c) - m) * s * w(c) + b(c)); });
  Kokkos::single(Kokkos::PerTeam(team), [&]() {
    mean[n] = m;
    rstd[n] = s;
  });
}
}  // namespace detail

// out (N,C) = (in - mean) * rstd * w (C) + b (C);   saves mean (N), rstd (N) for backward
// Statistics in T; out may be stored in another type S (bf16 / fp16 under mixed precision).
template <class T, class S = T>
void layernorm_forward(Mat<S> out, Vec<T> mean, Vec<T> rstd, CMat<T> in, CVec<T> w, CVec<T> b) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int C = in.extent(1);
  count_traffic(bytes_of(in, w, b), bytes_of(out, mean, rstd));
  Kokkos::parallel_for(
      "layernorm_forward", team_policy<ExecSpace>(in.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T* row = &in(n, 0);
        detail::layernorm_row<T, S>(team, n, [&](int c) { return row[c]; }, &out(n, 0), mean.data(), rstd.data(), w, b,
                                    C);
      });
}

// The residual stream's add and the next LayerNorm in one pass over the row:
//   x (N,C) += bias (C) + residual (N,C);   out = LayerNorm(x) as layernorm_forward
// (x holds a projection's product on entry). The same values as matmul.hpp's add_bias_residual
// followed by layernorm_forward.
template <class T, class S = T>
void residual_layernorm_forward(Mat<T> x, CVec<T> bias, CMat<T> residual, Mat<S> out, Vec<T> mean, Vec<T> rstd,
                                CVec<T> w, CVec<T> b) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int C = x.extent(1);
  count_traffic(bytes_of(x, bias, residual, w, b), bytes_of(x, out, mean, rstd));
  Kokkos::parallel_for(
      "residual_layernorm_forward", team_policy<ExecSpace>(x.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        T* row = &x(n, 0);
        const T* r = &residual(n, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) { row[c] += bias(c) + r[c]; });
        team.team_barrier();  // the row is complete before any thread sums it
        detail::layernorm_row<T, S>(team, n, [&](int c) { return row[c]; }, &out(n, 0), mean.data(), rstd.data(), w, b,
                                    C);
      });
}

// The backward in two halves (input gradient now, parameter gradients later: zero-bubble
// schedules); together they are layernorm_backward.
// din (N,C) += d/din
template <class T>
void layernorm_backward_input(Mat<T> din, CMat<T> dout, CMat<T> in, CVec<T> w, CVec<T> mean, CVec<T> rstd) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = in.extent(0), C = in.extent(1);
  count_traffic(bytes_of(din, dout, in, w, mean, rstd), bytes_of(din));
  Kokkos::parallel_for(
      "layernorm_backward_in", team_policy<ExecSpace>(N), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T m = mean(n), s = rstd(n);
        // the means of dnorm and of dnorm * norm
        const T g_mean = team_sum<T>(team, C, [&](int c) { return w(c) * dout(n, c); }) / C;
        const T gx_mean = team_sum<T>(team, C, [&](int c) { return w(c) * dout(n, c) * (in(n, c) - m) * s; }) / C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          const T norm = (in(n, c) - m) * s;
          din(n, c) += (w(c) * dout(n, c) - g_mean - norm * gx_mean) * s;
        });
      });
}

// dw (C) += sum_n dout*norm;  db (C) += sum_n dout  (column sums)
template <class T>
void layernorm_backward_params(Vec<T> dw, Vec<T> db, CMat<T> dout, CMat<T> in, CVec<T> mean, CVec<T> rstd) {
  const int N = in.extent(0), C = in.extent(1);
  count_traffic(bytes_of(dout, in, mean, rstd, dw, db), bytes_of(dw, db));
  column_sums<T, 2>("layernorm_backward_params", {dw, db}, N, C, KOKKOS_LAMBDA(int n, int c) {
    const T d = dout(n, c);
    return ColumnValues<T, 2>{{d * (in(n, c) - mean(n)) * rstd(n), d}};
  });
}

// din (N,C) += d/din;  dw (C) += sum_n dout*norm;  db (C) += sum_n dout
template <class T>
void layernorm_backward(Mat<T> din, Vec<T> dw, Vec<T> db, CMat<T> dout, CMat<T> in, CVec<T> w,
                        CVec<T> mean, CVec<T> rstd) {
  layernorm_backward_input<T>(din, dout, in, w, mean, rstd);
  layernorm_backward_params<T>(dw, db, dout, in, mean, rstd);
}

}  // namespace gpt2
