#pragma once
// Device-safe math functions: Kokkos 3.4 keeps them in Kokkos::Experimental, Kokkos 4 in Kokkos.
#include <Kokkos_Core.hpp>

namespace gpt2::km {
#if KOKKOS_VERSION >= 40000
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace gpt2::km
