#pragma once
// The 16-bit working copy of fp32 master weights under mixed precision: the bits of each value
// rounded to bf16 or fp16, in the masters' layout. The optimizer writes it in the pass that writes
// the masters (tensor/adamw_update.hpp), so a step's GEMMs read weights already rounded instead of
// rounding every weight at every GEMM of every microbatch.
#include <cstdint>

#include "tensor/convert.hpp"
#include "tensor/half.hpp"
#include "tensor/precision.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

struct WorkingCopy {
  Vec<uint16_t> bits;                   // empty: there is no working copy
  Precision precision = Precision::bf16;  // bf16 or fp16: how `bits` encodes a value
  bool empty() const { return bits.extent(0) == 0; }
  WorkingCopy slice(size_t begin, size_t n) const {
    return empty() ? WorkingCopy{} : WorkingCopy{Vec<uint16_t>(bits.data() + begin, n), precision};
  }
};

namespace detail {
// Writes element i's rounded value; the format is fixed before a loop (no branch inside).
struct NoCopy {
  KOKKOS_INLINE_FUNCTION void operator()(int64_t, float) const {}
};
template <class Format>
struct CopyTo {
  Vec<uint16_t> bits;
  KOKKOS_INLINE_FUNCTION void operator()(int64_t i, float x) const { bits(i) = Format::from_float(x); }
};
// f(writer) with the writer for `copy`'s format (NoCopy when empty).
template <class F>
void with_copy_writer(const WorkingCopy& copy, F&& f) {
  if (copy.empty()) f(NoCopy{});
  else if (copy.precision == Precision::fp16) f(CopyTo<half_bits::Fp16Format>{copy.bits});
  else f(CopyTo<half_bits::Bf16Format>{copy.bits});
}
}  // namespace detail

// copy (n) = round(values (n)): a whole refresh, where the masters changed outside the optimizer
// (initialisation, a checkpoint loaded, ZeRO's parameter all-gather).
inline void write_working_copy(const WorkingCopy& copy, CVec<float> values) {
  const size_t n = copy.bits.extent(0);
  uint16_t* p = copy.bits.data();
  if (copy.precision == Precision::fp16) convert<fp16, float>(Vec<fp16>(reinterpret_cast<fp16*>(p), n), values);
  else convert<bf16, float>(Vec<bf16>(reinterpret_cast<bf16*>(p), n), values);
}

}  // namespace gpt2
