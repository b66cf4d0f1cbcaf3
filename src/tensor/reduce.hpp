#pragma once
// Whole-buffer reductions in double, in a fixed order (the same input gives the same bits every
// run): chunks of 4096 summed by teams (8-lane partial sums on the host), then the chunk sums.
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// sum_i f(g(i)) for f = identity or square
template <class T, bool Square>
double chunked_sum(CVec<T> g) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  constexpr int64_t kChunk = 4096;
  const int64_t n = g.extent(0), chunks = (n + kChunk - 1) / kChunk;
  double total = 0;
  Kokkos::parallel_reduce(
      "chunked_sum", Policy(chunks, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const int64_t b = team.league_rank() * kChunk;
        const int len = int(b + kChunk <= n ? kChunk : n - b);
        const double s = team_sum<double>(team, len, [&](int j) {
          const double x = g(b + j);
          return Square ? x * x : x;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { acc += s; });
      },
      total);
  return total;
}

template <class T>
double sum_of(CVec<T> g) {
  return chunked_sum<T, false>(g);
}
template <class T>
double sum_of_squares(CVec<T> g) {
  return chunked_sum<T, true>(g);
}

}  // namespace gpt2
