#pragma once
// Sum / max of f(j), j in [0, n), over the threads of a team. On the host backends a team is one
// thread: there the loop keeps independent partial results (lanes) so the compiler can hold them in
// vector registers (a single running total is a serial dependency chain, and IEEE rules forbid the
// compiler from splitting it itself). The lanes' loop is marked as one (GCC 12 left the max's
// compare-and-select scalar without it: 45% of the loss kernel's time). The combination order
// depends on n alone, so results are reproducible. Forced inline: a fused kernel and the passes it
// replaces must compile f's arithmetic alike (whether GCC contracts `acc += d * d` into an FMA
// depends on what it inlined), or "bit for bit" fails; with the two lane counts GCC stopped
// inlining on its own in one of a pair (residual + LayerNorm, teams of 4).
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

namespace detail {
// One thread's sum / max of f(j), j in [0, n), in L lanes: lane k takes j = k (mod L) up to the
// last whole group of L; the rest goes to a total of its own (indexing the lanes there would keep
// them in memory through the main loop).
template <int L, class T, class F>
KOKKOS_FORCEINLINE_FUNCTION T lanes_sum(int n, const F& f) {
  T a[L] = {};
  int j = 0;
  for (; j + L <= n; j += L) {
    GPT2_VECTOR_LOOP
    for (int k = 0; k < L; ++k) a[k] += f(j + k);
  }
  T sum = 0;
  GPT2_VECTOR_SUM
  for (int i = j; i < n; ++i) sum += f(i);
  for (int w = L / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) a[k] += a[k + w];
  return a[0] + sum;
}

template <int L, class T, class F>
KOKKOS_FORCEINLINE_FUNCTION T lanes_max(int n, T first, const F& f) {
  T a[L];
  for (int k = 0; k < L; ++k) a[k] = first;
  int j = 0;
  for (; j + L <= n; j += L) {
    GPT2_VECTOR_LOOP
    for (int k = 0; k < L; ++k) {
      const T x = f(j + k);
      a[k] = x > a[k] ? x : a[k];
    }
  }
  T mx = first;
  GPT2_VECTOR_MAX
  for (int i = j; i < n; ++i) {
    const T x = f(i);
    mx = x > mx ? x : mx;
  }
  for (int k = 0; k < L; ++k) mx = a[k] > mx ? a[k] : mx;
  return mx;
}

// Long rows in 32 lanes (4 vector registers of doubles: 4 chains of adds in flight, as an add's
// latency needs; 8 lanes ran the gradient norm's double sums at a quarter of the in-cache rate),
// short ones in 8 (an attention row of a few dozen would otherwise go mostly to the rest's total).
constexpr int kLongRow = 128;
}  // namespace detail

template <class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION T team_sum(const Member& team, int n, const F& f) {
  T total = 0;
  if (team.team_size() > 1) {
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](int j, T& acc) { acc += f(j); }, total);
    return total;
  }
  return n >= detail::kLongRow ? detail::lanes_sum<32, T>(n, f) : detail::lanes_sum<8, T>(n, f);
}

template <class T, class Member, class F>
KOKKOS_FORCEINLINE_FUNCTION T team_max(const Member& team, int n, const F& f) {
  T best = f(0);
  if (team.team_size() > 1) {
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](int j, T& m) { m = f(j) > m ? f(j) : m; },
        Kokkos::Max<T>(best));
    return best;
  }
  return n >= detail::kLongRow ? detail::lanes_max<32>(n, best, f) : detail::lanes_max<8>(n, best, f);
}

}  // namespace gpt2
