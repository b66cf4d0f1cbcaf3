#pragma once
// Sum / max of f(j), j in [0, n), over the threads of a team. On the host backends a team is one
// thread: there the loop keeps 8 independent partial results so the compiler can hold them in
// vector registers (a single running total is a serial dependency chain, and IEEE rules forbid the
// compiler from splitting it itself); the lanes' loop is marked as one (GCC 12 left the max's
// compare-and-select scalar without it: 45% of the loss kernel's time). The combination order is
// fixed, so results are reproducible.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdlib>

// A loop each of whose iterations is independent (host: vectorised; a GPU thread runs it in order).
// The same with a running maximum `mx` or sum `sum` of its iterations.
#if defined(__CUDA_ARCH__)
#define GPT2_VECTOR_LOOP
#define GPT2_VECTOR_MAX
#define GPT2_VECTOR_SUM
#else
#define GPT2_VECTOR_LOOP _Pragma("omp simd")
#define GPT2_VECTOR_MAX _Pragma("omp simd reduction(max : mx)")
#define GPT2_VECTOR_SUM _Pragma("omp simd reduction(+ : sum)")
#endif

namespace gpt2 {

// The teams of every team kernel: `league` teams of the backend's size (Kokkos::AUTO: one thread on
// the host, a warp or more on a GPU), or of GPT2_TEAM_SIZE threads when that is set (clamped to
// the threads there are): the tests run the host backends with several threads a team, as a GPU
// runs them, so a missing team barrier shows on a CPU (and under ThreadSanitizer).
template <class Space>
Kokkos::TeamPolicy<Space> team_policy(int64_t league) {
  static const int forced = [] {
    const char* e = std::getenv("GPT2_TEAM_SIZE");
    return e ? std::max(0, std::atoi(e)) : 0;
  }();
  if (forced > 1) {
    const int size = std::min(forced, Space().concurrency());
    if (size > 1) return Kokkos::TeamPolicy<Space>(league, size);
  }
  return Kokkos::TeamPolicy<Space>(league, Kokkos::AUTO);
}

template <class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T team_sum(const Member& team, int n, const F& f) {
  T total = 0;
  if (team.team_size() > 1) {
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](int j, T& acc) { acc += f(j); }, total);
    return total;
  }
  T a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    GPT2_VECTOR_LOOP
    for (int k = 0; k < 8; ++k) a[k] += f(j + k);
  }
  for (int k = 0; j < n; ++j, ++k) a[k] += f(j);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

template <class T, class Member, class F>
KOKKOS_INLINE_FUNCTION T team_max(const Member& team, int n, const F& f) {
  T best = f(0);
  if (team.team_size() > 1) {
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](int j, T& m) { m = f(j) > m ? f(j) : m; },
        Kokkos::Max<T>(best));
    return best;
  }
  T a[8] = {best, best, best, best, best, best, best, best};
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    GPT2_VECTOR_LOOP
    for (int k = 0; k < 8; ++k) {
      const T x = f(j + k);
      a[k] = x > a[k] ? x : a[k];
    }
  }
  for (; j < n; ++j) {
    const T x = f(j);
    a[0] = x > a[0] ? x : a[0];
  }
  for (int k = 1; k < 8; ++k) best = a[k] > best ? a[k] : best;
  return best;
}

}  // namespace gpt2
