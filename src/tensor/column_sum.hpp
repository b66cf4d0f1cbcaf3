#pragma once
// Column reductions out(c) += sum_n f(n, c) over an (N, C) row-major matrix -- bias and LayerNorm
// parameter gradients, one sum or several in one pass. f is called once for each (n, c), so it may
// also store what it returns (an elementwise pass fused with the sum: gelu.hpp's gelu_bias_backward).
// Two stages, deterministic, no atomics: a team owns a block of columns; its threads sum the rows in
// blocks of consecutive rows (each in row order: kRowsPerBlock rows, more past kMaxRowBlocks blocks)
// into team scratch, then the block sums are added in block order. The blocks depend on N only, so
// every backend, team size, thread count and column width gives the same bits, and a GPU gets N / 64
// threads a column (128 at B 8, T 1024), where one thread a column walking all N rows kept under 1%
// of an H100 busy. On the host a column block is kColumnSumWidth contiguous columns: each row is read
// as a run of cache lines and the sums vectorize. A GPU runs the same sums as two flat kernels
// (column_sums_by_blocks): a team a column read one value of each 32-byte sector it loaded and ran at
// 6-9% of an H200's copy bandwidth (2026-11-28).
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

constexpr bool kHostExec = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
constexpr int kColumnBlock = kHostExec ? 16 : 1;  // (embedding.hpp's grouped row sums)
// Columns a host team sums: 128 (8 cache lines of each row) ran bias gradients over 3072 columns in
// 30 us against 116 at 16 columns (one line of each row, rows 12 KB apart), 38 at 64 and 28 at 256
// (256 rows, 2 threads, bench_train_step's BM_BiasBackward, 2026-11-29).
constexpr int kColumnSumWidth = kHostExec ? 128 : 1;
constexpr int kRowsPerBlock = 64, kMaxRowBlocks = 4096;

// Rows a block (a function of N alone) and the blocks of a column.
KOKKOS_INLINE_FUNCTION int column_sum_rows_per_block(int N) {
  const int spread = (N + kMaxRowBlocks - 1) / kMaxRowBlocks;
  return spread > kRowsPerBlock ? spread : kRowsPerBlock;
}
inline int column_sum_row_blocks(int N) {
  const int rows = column_sum_rows_per_block(N);
  return N > 0 ? (N + rows - 1) / rows : 1;
}
// Work items (threads' shares) one column_sum launch offers: column blocks x row blocks.
inline int64_t column_sum_work_items(int N, int C) {
  return int64_t((C + kColumnSumWidth - 1) / kColumnSumWidth) * column_sum_row_blocks(N);
}

namespace detail {
// column_sum_by_blocks' block sums (row blocks x columns), kept between calls: grown at set-up
// (reserve_column_sum_scratch), freed before Kokkos finalizes.
template <class T>
Buffer<T>& column_sum_parts() {
  static Buffer<T> parts;
  return parts;
}
template <class T>
void grow_column_sum_parts(size_t n) {
  static const bool hooked = [] {
    Kokkos::push_finalize_hook([] { column_sum_parts<T>() = Buffer<T>(); });
    return true;
  }();
  (void)hooked;
  if (column_sum_parts<T>().extent(0) < n)
    column_sum_parts<T>() = uninitialized<T>("column_sum_parts", n);
}
}  // namespace detail

// Set-up: the workspace column sums over up to N rows and C columns of T ask for (two sums a pass at
// most: LayerNorm's), made now: Kokkos'
// per-team workspace on the host (a host backend grows it at the first kernel that asks for more --
// an allocation and a free in the step that runs it), the block sums on a GPU.
template <class T>
void reserve_column_sum_scratch(int N, int C) {
  if constexpr (!kHostExec) {
    detail::grow_column_sum_parts<T>(size_t(column_sum_row_blocks(N)) * size_t(C) * 2);
  } else {
    using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
    using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
    auto policy = team_policy<ExecSpace>(1);
    const size_t parts = size_t(column_sum_row_blocks(N)) * kColumnSumWidth * 2;
    policy.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(parts)));
    Kokkos::parallel_for("reserve_column_sum_scratch", policy, KOKKOS_LAMBDA(const Member&) {});
  }
}

// M column sums in one pass over the rows: f(n, c) returns ColumnValues<T, M> and out[m](c) +=
// sum_n f(n, c)[m] (LayerNorm's weight and bias gradients read their output gradient once).
template <class T, int M>
struct ColumnValues {
  T v[M];
  KOKKOS_INLINE_FUNCTION const T& operator[](int m) const { return v[m]; }
};
template <class T, int M>
using ColumnOuts = Kokkos::Array<Vec<T>, M>;

// The same sums as column_sums' teams, in the same order (each column: a row block's rows in row
// order, then the blocks in block order: a plain sum's bits; a product may contract into FMAs
// differently), as two flat kernels -- a thread a (row block, column), columns fastest so a warp
// reads consecutive values of a row, its sums into the block sums; then a thread a column adding its
// blocks. What a GPU runs; the host's tests run it too.
template <class T, int M, class F>
void column_sums_by_blocks(const char* label, ColumnOuts<T, M> out, int N, int C, const F& f) {
  const int rows = column_sum_rows_per_block(N), R = column_sum_row_blocks(N);
  const int64_t RC = int64_t(R) * C;
  detail::grow_column_sum_parts<T>(size_t(M) * size_t(RC));
  const Vec<T> part(detail::column_sum_parts<T>().data(), size_t(M) * size_t(RC));
  count_traffic(bytes_of(part), bytes_of(part));  // (the caller counts what f reads)
  Kokkos::parallel_for(
      label, IndexRange(0, RC), KOKKOS_LAMBDA(int64_t i) {
        const int r = int(i / C), c = int(i % C), n0 = r * rows, n1 = n0 + rows < N ? n0 + rows : N;
        T acc[M] = {};
        for (int n = n0; n < n1; ++n) {
          const ColumnValues<T, M> x = f(n, c);
          for (int m = 0; m < M; ++m) acc[m] += x[m];
        }
        for (int m = 0; m < M; ++m) part(m * RC + i) = acc[m];
      });
  Kokkos::parallel_for(
      "column_sum_blocks", IndexRange(0, C), KOKKOS_LAMBDA(int64_t c) {
        for (int m = 0; m < M; ++m) {
          T s = 0;
          for (int r = 0; r < R; ++r) s += part(m * RC + int64_t(r) * C + c);
          out[m](c) += s;
        }
      });
}

template <class T, int M, class F>
void column_sums(const char* label, ColumnOuts<T, M> out, int N, int C, const F& f) {
  if constexpr (!kHostExec) {
    column_sums_by_blocks<T, M>(label, out, N, C, f);
    return;
  }
  constexpr int W = kColumnSumWidth;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const int rows = column_sum_rows_per_block(N), R = column_sum_row_blocks(N);
  auto policy = team_policy<ExecSpace>((C + W - 1) / W);
  policy.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(R * W * M)));
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const Member& team) {
        const Scratch part(team.team_scratch(0), R * W * M);  // (row block, column, sum)
        const int c0 = team.league_rank() * W, w = c0 + W <= C ? W : C - c0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int r) {
          const int n0 = r * rows, n1 = n0 + rows < N ? n0 + rows : N;
          T acc[W * M] = {};
          auto add_row = [&](int n, int width) {
            for (int k = 0; k < width; ++k) {
              const ColumnValues<T, M> x = f(n, c0 + k);
              for (int m = 0; m < M; ++m) acc[k * M + m] += x[m];
            }
          };
          if (w == W) {
            for (int n = n0; n < n1; ++n) add_row(n, W);
          } else {
            for (int n = n0; n < n1; ++n) add_row(n, w);
          }
          for (int j = 0; j < W * M; ++j) part(r * W * M + j) = acc[j];
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * M), [&](int j) {
          T s = 0;
          for (int r = 0; r < R; ++r) s += part(r * W * M + j);
          out[j % M](c0 + j / M) += s;
        });
      });
}

// One column sum: out(c) += sum_n f(n, c), f returning T.
template <class T, class F>
void column_sum(const char* label, Vec<T> out, int N, int C, const F& f) {
  column_sums<T, 1>(label, {out}, N, C, KOKKOS_LAMBDA(int n, int c) { return ColumnValues<T, 1>{{f(n, c)}}; });
}
template <class T, class F>
void column_sum_by_blocks(const char* label, Vec<T> out, int N, int C, const F& f) {
  column_sums_by_blocks<T, 1>(label, {out}, N, C,
                              KOKKOS_LAMBDA(int n, int c) { return ColumnValues<T, 1>{{f(n, c)}}; });
}

}  // namespace gpt2
