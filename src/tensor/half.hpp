#pragma once
// 16-bit floating-point storage types for mixed precision: bf16 (8-bit exponent, 7-bit mantissa,
// fp32's range) and fp16 (IEEE binary16: 5-bit exponent, 10-bit mantissa, largest finite 65504).
// Both are plain 2-byte values usable in device code; arithmetic happens in float (they convert
// implicitly both ways). float -> 16 bits rounds to nearest, ties to even; NaN stays NaN; fp16
// overflows to infinity (that is what fp16 loss scaling detects).
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace gpt2 {

namespace half_bits {
// The same bits as another type (float <-> uint32_t), in device code too.
template <class To, class From>
KOKKOS_INLINE_FUNCTION To reinterpret(From x) {
  union {
    From from;
    To to;
  } u{x};
  return u.to;
}
KOKKOS_INLINE_FUNCTION uint32_t of(float f) { return reinterpret<uint32_t>(f); }
KOKKOS_INLINE_FUNCTION float to_float(uint32_t u) { return reinterpret<float>(u); }

KOKKOS_INLINE_FUNCTION uint16_t bf16_from_float(float f) {
  const uint32_t u = of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN: keep it quiet
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                   // nearest, ties to even
}
KOKKOS_INLINE_FUNCTION float bf16_to_float(uint16_t b) { return to_float(uint32_t(b) << 16); }

// IEEE binary16 with round to nearest even, subnormals, overflow to infinity.
KOKKOS_INLINE_FUNCTION uint16_t fp16_from_float(float f) {
  uint32_t u = of(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= (127u + 16u) << 23) {  // >= 2^16 (finite values from 65520 on round up to it), inf, NaN
    o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (u < 113u << 23) {  // below 2^-14: a subnormal half; the float add does the rounding
    const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    o = uint16_t(of(to_float(u) + to_float(magic)) - magic);
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
    o = uint16_t(u >> 13);
  }
  return uint16_t(o | (sign >> 16));
}
KOKKOS_INLINE_FUNCTION float fp16_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (uint32_t(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += uint32_t(127 - 15) << 23;
  if (exp == shifted_exp) {
    o += uint32_t(128 - 16) << 23;  // infinity, NaN
  } else if (exp == 0) {            // zero, subnormal: renormalise through a float subtraction
    o += 1u << 23;
    o = of(to_float(o) - to_float(113u << 23));
  }
  return to_float(o | ((uint32_t(h) & 0x8000u) << 16));
}
}  // namespace half_bits

namespace half_bits {
struct Bf16Format {
  static KOKKOS_INLINE_FUNCTION uint16_t from_float(float f) { return bf16_from_float(f); }
  static KOKKOS_INLINE_FUNCTION float to_float(uint16_t b) { return bf16_to_float(b); }
};
struct Fp16Format {
  static KOKKOS_INLINE_FUNCTION uint16_t from_float(float f) { return fp16_from_float(f); }
  static KOKKOS_INLINE_FUNCTION float to_float(uint16_t h) { return fp16_to_float(h); }
};
}  // namespace half_bits

// A 16-bit float of the given format, converting implicitly to and from float.
template <class Format>
struct Float16 {
  uint16_t bits;
  Float16() = default;
  KOKKOS_INLINE_FUNCTION Float16(float f) : bits(Format::from_float(f)) {}  // NOLINT: implicit
  KOKKOS_INLINE_FUNCTION Float16(double d) : Float16(float(d)) {}            // NOLINT
  KOKKOS_INLINE_FUNCTION operator float() const { return Format::to_float(bits); }
};
using bf16 = Float16<half_bits::Bf16Format>;
using fp16 = Float16<half_bits::Fp16Format>;

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit storage types");

// The value type kernels compute in for a storage type: float for the 16-bit ones, else itself.
template <class S>
struct compute_type {
  using type = S;
};
template <class Format>
struct compute_type<Float16<Format>> {
  using type = float;
};

}  // namespace gpt2
