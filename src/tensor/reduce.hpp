#pragma once
// Whole-buffer reductions in double, in a fixed order (the same input gives the same bits every
// run): chunks of 4096 summed by teams (8-lane partial sums on the host), then the chunk sums.
// On the host the chunk sums are added one after another, in chunk order, whatever the number of
// threads: a Kokkos parallel_reduce joins per-thread partial sums, whose grouping follows the thread
// count (OpenMP/Threads backends), so 1 and 4 threads gave different bits.
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/device_work.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// Where a reduction's result goes: a 0-d view in the execution space's memory. Filled
// asynchronously (no host round trip), so it can feed later kernels and communication directly.
using DeviceScalar = Kokkos::View<double, MemSpace, Kokkos::MemoryUnmanaged>;

constexpr bool kHostReduce = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

namespace detail {
constexpr int64_t kSumChunk = 4096;

// A chunk of a reduction: its first index and length (a plain struct: device code may not build a
// std::pair, whose constructors are host functions).
struct ChunkSpan {
  int64_t begin;
  int len;
};

// partial(at + c) = sum_j f(g(b + j)), j < len, for each chunk c < chunks (chunk(c) gives b and len),
// one team a chunk (8-lane partial sums on the host), chunks in parallel.
template <class T, bool Square, class Chunk, class Partial>
void chunk_sums(CVec<T> g, int64_t chunks, const Chunk& chunk, Partial partial, int64_t at = 0) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  if (chunks <= 0) return;
  count_traffic(std::min<uint64_t>(uint64_t(chunks) * kSumChunk, g.extent(0)) * sizeof(T), uint64_t(chunks) * sizeof(double));
  Kokkos::parallel_for(
      "chunked_sum", team_policy<ExecSpace>(chunks), KOKKOS_LAMBDA(const Member& team) {
        const ChunkSpan c = chunk(team.league_rank());
        const int64_t b = c.begin;
        const double s = team_sum<double>(team, c.len, [&](int j) {
          const double x = g(b + j);
          return Square ? x * x : x;
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { partial(at + team.league_rank()) = s; });
      });
}

// The host form of a whole reduction: the chunk sums into an array, then added on the calling
// thread in chunk order -- the order in which the Serial backend's parallel_reduce adds them, so
// Serial and threaded builds agree bit for bit.
template <class T, bool Square, class Chunk>
double chunk_sums_in_order(CVec<T> g, int64_t chunks, const Chunk& chunk) {
  if (chunks <= 0) return 0;
  std::vector<double> partial(size_t(chunks), 0.0);
  chunk_sums<T, Square>(g, chunks, chunk,
                        Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(partial.data(), partial.size()));
  double total = 0;  // (the kernel is done: Kokkos' host backends finish one before its launch returns)
  for (const double s : partial) total += s;
  return total;
}

template <class Result>
void assign(Result&& result, double value) {
  if constexpr (std::is_arithmetic_v<std::remove_reference_t<Result>>)
    result = value;
  else
    result() = value;
}
}  // namespace detail

// sum_i f(g(i)) for f = identity or square, into result: a double& (the host waits for it) or a
// DeviceScalar (queued like any kernel).
template <class T, bool Square, class Result>
void chunked_sum(CVec<T> g, Result&& result) {
  constexpr int64_t kChunk = detail::kSumChunk;
  const int64_t n = g.extent(0), chunks = (n + kChunk - 1) / kChunk;
  if constexpr (kHostReduce) {
    detail::assign(result, detail::chunk_sums_in_order<T, Square>(g, chunks, [=](int64_t c) {
      const int64_t b = c * kChunk;
      return detail::ChunkSpan{b, int(b + kChunk <= n ? kChunk : n - b)};
    }));
  } else {
    using Policy = Kokkos::TeamPolicy<ExecSpace>;
    using Member = Policy::member_type;
    Kokkos::parallel_reduce(
        "chunked_sum", team_policy<ExecSpace>(chunks > 0 ? chunks : 1),  // (one empty team when n = 0)
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

// The squared norm of a selection of a buffer -- ranges [begin, end), in order -- cut into chunks of
// 4096 once. Each chunk's sum can be taken as soon as its values are final (a gradient bucket just
// reduced, still in cache: add_chunk_squares), the total later, always in chunk order.
struct ChunkTable {
  Kokkos::View<int64_t*, MemSpace> starts, lengths;
  Kokkos::View<double*, MemSpace> partial;  // each chunk's sum of squares
  std::vector<std::pair<int64_t, int64_t>> spans;  // on the host: each chunk's [begin, end)
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
  for (size_t c = 0; c < starts.size(); ++c) t.spans.push_back({starts[c], starts[c] + lengths[c]});
  t.starts = Kokkos::View<int64_t*, MemSpace>("chunk_starts", starts.size() + 1);
  t.lengths = Kokkos::View<int64_t*, MemSpace>("chunk_lengths", starts.size() + 1);
  t.partial = Kokkos::View<double*, MemSpace>("chunk_squares", starts.size() + 1);
  using Host = Kokkos::View<const int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  if (t.count) {  // (made once, at set-up: the host vectors go when this returns)
    Kokkos::deep_copy(Kokkos::subview(t.starts, std::make_pair(int64_t(0), t.count)),  // device_sync-ok: set-up
                      Host(starts.data(), starts.size()));
    Kokkos::deep_copy(Kokkos::subview(t.lengths, std::make_pair(int64_t(0), t.count)),  // device_sync-ok: set-up
                      Host(lengths.data(), lengths.size()));
  }
  return t;
}

// table.partial(c) = the sum of g(i)^2 over chunk c, for chunks [first, last) (queued like any kernel).
template <class T>
void chunk_squares(CVec<T> g, const ChunkTable& table, int64_t first, int64_t last) {
  const auto starts = table.starts, lengths = table.lengths;
  detail::chunk_sums<T, true>(
      g, last - first,
      KOKKOS_LAMBDA(int64_t c) { return detail::ChunkSpan{starts(first + c), int(lengths(first + c))}; },
      table.partial, first);
}

// out = the sum of every chunk's partial, in chunk order on the host (the same bits at any thread
// count); queued like any kernel.
inline void chunk_total(const ChunkTable& table, DeviceScalar out) {
  const auto partial = table.partial;
  const int64_t n = table.count;
  if constexpr (kHostReduce) {  // (the chunk sums are done: a host backend's kernels finish before returning)
    device_work();  // the host does the kernel's work: after what the stream was ordered after
    double total = 0;
    for (int64_t c = 0; c < n; ++c) total += partial(c);
    out() = total;
  } else {
    Kokkos::parallel_reduce(
        "chunk_total", IndexRange(0, n > 0 ? n : 1),
        KOKKOS_LAMBDA(int64_t c, double& acc) { acc += c < n ? partial(c) : 0.0; }, out);
  }
}

}  // namespace gpt2
