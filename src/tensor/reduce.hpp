#pragma once
// Whole-buffer reductions in double, in a fixed order (the same input gives the same bits every
// run): chunks of 4096 summed by teams (8-lane partial sums on the host), then the chunk sums.
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// Where a reduction's result goes: a 0-d view in the execution space's memory. Filled
// asynchronously (no host round trip), so it can feed later kernels and communication directly.
using DeviceScalar = Kokkos::View<double, MemSpace, Kokkos::MemoryUnmanaged>;

// sum_i f(g(i)) for f = identity or square, into result: a double& (the host waits for it) or a
// DeviceScalar (queued like any kernel).
template <class T, bool Square, class Result>
void chunked_sum(CVec<T> g, Result&& result) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  constexpr int64_t kChunk = 4096;
  const int64_t n = g.extent(0), chunks = (n + kChunk - 1) / kChunk;
  Kokkos::parallel_reduce(
      "chunked_sum", Policy(chunks > 0 ? chunks : 1, Kokkos::AUTO),  // (one empty team when n = 0)
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const int64_t b = team.league_rank() * kChunk;
        const int len = int(b + kChunk <= n ? kChunk : n - b);
        const double s = team_sum<double>(team, len, [&](int j) {
          const double x = g(b + j);
          return Square ? x * x : x;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { acc += s; });
      },
      result);
}

template <class T>
double sum_of(CVec<T> g) {
  double total = 0;
  chunked_sum<T, false>(g, total);
  return total;
}
template <class T>
double sum_of_squares(CVec<T> g) {
  double total = 0;
  chunked_sum<T, true>(g, total);
  return total;
}
template <class T>
void sum_of(CVec<T> g, DeviceScalar out) {
  chunked_sum<T, false>(g, out);
}
template <class T>
void sum_of_squares(CVec<T> g, DeviceScalar out) {
  chunked_sum<T, true>(g, out);
}

}  // namespace gpt2
