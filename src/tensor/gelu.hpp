#pragma once
// GELU, GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "tensor/column_sum.hpp"
#include "tensor/math.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

template <class T>
KOKKOS_INLINE_FUNCTION T gelu(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + km::tanhf_(u));
}

// gelu'(x)
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_grad(T x) {
  const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
  const T th = km::tanhf_(u);
  const T du = T(0.7978845608028654) * (T(1) + T(3 * 0.044715) * x * x);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
}

// out (n) = gelu(in (n));   flat over all elements; computed in T, out stored as S (T, bf16, fp16)
template <class T, class S = T>
void gelu_forward(Vec<S> out, CVec<T> in) {
  count_traffic(bytes_of(in), bytes_of(out));
  for_each_index(
      "gelu_forward", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) { out(i) = S(gelu(in(i))); });
}

// The MLP's bias and activation in one pass over its pre-activation (the GEMM's output):
// pre (N,OC) += b (OC);   out (N,OC) = gelu(pre), stored as S. The same values as the bias pass
// (matmul.hpp's add_bias_residual) followed by gelu_forward.
template <class T, class S = T>
void bias_gelu_forward(Mat<T> pre, CVec<T> b, Mat<S> out) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int OC = pre.extent(1);
  count_traffic(bytes_of(pre, b), bytes_of(pre, out));
  Kokkos::parallel_for(
      "bias_gelu_forward", team_policy<ExecSpace>(pre.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        T* row = &pre(n, 0);
        S* o = &out(n, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, OC), [&](int c) {
          const T x = row[c] + b(c);
          row[c] = x;
          o[c] = S(gelu(x));
        });
      });
}

// In place: d (n) holds dout on entry and din = dout * gelu'(in (n)) on exit
template <class T>
void gelu_backward(Vec<T> d, CVec<T> in) {
  count_traffic(bytes_of(d, in), bytes_of(d));
  for_each_index(
      "gelu_backward", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) { d(i) *= gelu_grad(in(i)); });
}

// The activation's backward and the bias gradient before it in one pass over the rows (what
// gelu_backward, bias_backward and the GEMMs' 16-bit rounding of the result read and write in
// three): d (N,OC) holds dout;  out (N,OC) = din = dout * gelu'(pre), stored as S (d itself under
// fp32, else the 16-bit operand of the GEMMs that follow);  db (OC) += colsum(din) (unrounded).
template <class T, class S>
void gelu_bias_backward(Mat<S> out, Vec<T> db, CMat<T> d, CMat<T> pre) {
  count_traffic(bytes_of(d, pre, db), bytes_of(out, db));
  column_sum<T>("gelu_bias_backward", db, int(d.extent(0)), int(d.extent(1)), KOKKOS_LAMBDA(int n, int c) {
    const T v = d(n, c) * gelu_grad(pre(n, c));
    out(n, c) = S(v);
    return v;
  });
}

}  // namespace gpt2
