#pragma once
// GELU, GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "tensor/math.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (n) = gelu(in (n));   flat over all elements; computed in T, out stored as S (T, bf16, fp16)
template <class T, class S = T>
void gelu_forward(Vec<S> out, CVec<T> in) {
  for_each_index(
      "gelu_forward", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const T x = in(i);
        const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
        out(i) = S(T(0.5) * x * (T(1) + km::tanhf_(u)));
      });
}

// In place: d (n) holds dout on entry and din = dout * gelu'(in (n)) on exit
template <class T>
void gelu_backward(Vec<T> d, CVec<T> in) {
  for_each_index(
      "gelu_backward", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const T x = in(i);
        const T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
        const T th = km::tanhf_(u);
        const T du = T(0.7978845608028654) * (T(1) + T(3 * 0.044715) * x * x);
        d(i) *= (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
      });
}

}  // namespace gpt2
