#pragma once
// Device-safe math. Kokkos 3.4 keeps the standard functions in Kokkos::Experimental, Kokkos 4 in
// Kokkos. exp/tanh for float get a branch-free polynomial on the host so that elementwise loops
// vectorize (a libm call stops GCC's vectorizer); CUDA uses its own fast intrinsics-backed
// expf. Double stays exact (the gradient checks run in double).
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace gpt2::km {
#if KOKKOS_VERSION >= 40000
using Kokkos::cos;
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

// e^x for float, within 2 ulp, for x already inside [-87.3, 88.7] (Cody-Waite reduction, degree-6
// polynomial). Callers that bound x themselves use it directly: fast_exp's own clamp, its compares
// and blends, was 30% of GELU's time (fast_tanh clamps to +-9 first).
KOKKOS_INLINE_FUNCTION float exp_in_range(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  // Round to nearest with the 1.5 * 2^23 trick: vectorizes on plain SSE2 (floorf does not).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln 2 split in two for an exact reduction
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
#endif
}

// e^x for float: 0 below about -87.3, +large finite above 88.7 (the callers never go there).
KOKKOS_INLINE_FUNCTION float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return exp_in_range(x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x));
#endif
}

KOKKOS_INLINE_FUNCTION float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (e^{2x} + 1); clamped where float tanh is +-1 anyway, which keeps 2x in range
  x = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  return 1.0f - 2.0f / (exp_in_range(2.0f * x) + 1.0f);
}

// Type-generic entry points: fast for float, exact for double.
KOKKOS_INLINE_FUNCTION float expf_(float x) { return fast_exp(x); }
KOKKOS_INLINE_FUNCTION double expf_(double x) { return exp(x); }
KOKKOS_INLINE_FUNCTION float tanhf_(float x) { return fast_tanh(x); }
KOKKOS_INLINE_FUNCTION double tanhf_(double x) { return tanh(x); }

}  // namespace gpt2::km
