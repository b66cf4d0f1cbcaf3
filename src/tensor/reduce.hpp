#pragma once
// Whole-buffer reductions in double, in a fixed order (the same input gives the same bits every
// run): chunks of 4096 summed by teams (8-lane partial sums on the host), then the chunk sums.
#include <algorithm>
#include <utility>
#include <vector>

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

// A selection of a buffer -- ranges [begin, end), in order -- cut into chunks of 4096 once, for
// reductions over it in a fixed order (e.g. the squared norm of the tensors a rank counts).
struct ChunkTable {
  Kokkos::View<int64_t*, MemSpace> starts, lengths;
  int64_t count = 0;
};
inline ChunkTable make_chunk_table(const std::vector<std::pair<size_t, size_t>>& ranges) {
  constexpr size_t kChunk = 4096;
  std::vector<int64_t> starts, lengths;
  for (const auto& r : ranges)
    for (size_t b = r.first; b < r.second; b += kChunk) {
      starts.push_back(int64_t(b));
      lengths.push_back(int64_t(std::min(kChunk, r.second - b)));
    }
  ChunkTable t;
  t.count = int64_t(starts.size());
  t.starts = Kokkos::View<int64_t*, MemSpace>("chunk_starts", starts.size() + 1);
  t.lengths = Kokkos::View<int64_t*, MemSpace>("chunk_lengths", starts.size() + 1);
  using Host = Kokkos::View<const int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  if (t.count) {
    Kokkos::deep_copy(Kokkos::subview(t.starts, std::make_pair(int64_t(0), t.count)), Host(starts.data(), starts.size()));
    Kokkos::deep_copy(Kokkos::subview(t.lengths, std::make_pair(int64_t(0), t.count)), Host(lengths.data(), lengths.size()));
  }
  return t;
}

// sum of g(i)^2 over the table's selection of g, into out (queued like any kernel).
template <class T>
void sum_of_squares(CVec<T> g, const ChunkTable& table, DeviceScalar out) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const auto starts = table.starts, lengths = table.lengths;
  const int64_t n = table.count;
  Kokkos::parallel_reduce(
      "sum_of_squares_selection", Policy(n > 0 ? n : 1, Kokkos::AUTO),  // (one empty team when n = 0)
      KOKKOS_LAMBDA(const Member& team, double& acc) {
        const int64_t c = team.league_rank();
        const int64_t b = c < n ? starts(c) : 0;
        const int len = c < n ? int(lengths(c)) : 0;
        const double s = team_sum<double>(team, len, [&](int j) {
          const double x = g(b + j);
          return x * x;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { acc += s; });
      },
      out);
}

}  // namespace gpt2
