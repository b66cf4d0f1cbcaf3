#pragma once
// Residual connections. The backward of out = a + b is "pass dout to both", done by the block.
#include "tensor/elementwise.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (n) = a (n) + b (n)
template <class T>
void residual_forward(Vec<T> out, CVec<T> a, CVec<T> b) {
  count_traffic(bytes_of(a, b), bytes_of(out));
  for_each_index(
      "residual_forward", int64_t(out.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { out(i) = a(i) + b(i); });
}

// y (n) += x (n)
template <class T>
void accumulate(Vec<T> y, CVec<T> x) {
  count_traffic(bytes_of(y, x), bytes_of(y));
  for_each_index(
      "accumulate", int64_t(y.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { y(i) += x(i); });
}


}  // namespace gpt2
