#pragma once
// Elementwise conversion between storage types (fp32 <-> bf16 / fp16, float <-> double): the
// 16-bit GEMM inputs are made from fp32 values with it.
#include "tensor/half.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (n) = To(in (n))
template <class To, class From>
void convert(Vec<To> out, Vec<const From> in) {
  using C = typename compute_type<From>::type;
  count_traffic(bytes_of(in), bytes_of(out));
  for_each_index(
      "convert", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) { out(i) = To(C(in(i))); });
}

// out (n) += To(in (n))
template <class To, class From>
void convert_add(Vec<To> out, Vec<const From> in) {
  using C = typename compute_type<From>::type;
  count_traffic(bytes_of(in, out), bytes_of(out));
  for_each_index(
      "convert_add", int64_t(in.extent(0)), KOKKOS_LAMBDA(int64_t i) { out(i) += To(C(in(i))); });
}

}  // namespace gpt2
