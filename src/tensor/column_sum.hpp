#pragma once
// Column reductions out(c) += sum_n f(n, c) over an (N, C) row-major matrix -- bias and LayerNorm
// parameter gradients. f is called once for each (n, c), so it may also store what it returns (an
// elementwise pass fused with the sum: gelu.hpp's gelu_bias_backward). Two stages, deterministic, no atomics: a team owns a block of columns; its
// threads sum the rows in blocks of consecutive rows (each in row order: kRowsPerBlock rows, more
// past kMaxRowBlocks blocks) into team scratch, then the block sums are added in block order. The
// blocks depend on N only, so every backend, team size and thread count gives the same bits, and a
// GPU gets N / 64 threads a column (128 at B 8, T 1024), where one thread a column walking all N
// rows kept under 1% of an H100 busy. On the host a column block is 16 contiguous columns, so every
// row is read as one cache line and the 16 sums vectorize. A GPU runs the same sums as two flat
// kernels (column_sum_by_blocks): a team a column read one value of each 32-byte sector it loaded
// and ran at 6-9% of an H200's copy bandwidth (2026-11-28).
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

constexpr bool kHostExec = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
constexpr int kColumnBlock = kHostExec ? 16 : 1;
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
  return int64_t((C + kColumnBlock - 1) / kColumnBlock) * column_sum_row_blocks(N);
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
    column_sum_parts<T>() = Buffer<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "column_sum_parts"), n);
}
}  // namespace detail

// Set-up: the workspace a column_sum over up to N rows and C columns of T asks for, made now: Kokkos'
// per-team workspace on the host (a host backend grows it at the first kernel that asks for more --
// an allocation and a free in the step that runs it), the block sums on a GPU.
template <class T>
void reserve_column_sum_scratch(int N, int C) {
  if constexpr (!kHostExec) {
    detail::grow_column_sum_parts<T>(size_t(column_sum_row_blocks(N)) * size_t(C));
  } else {
    using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
    using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
    auto policy = team_policy<ExecSpace>(1);
    policy.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(size_t(column_sum_row_blocks(N)) * kColumnBlock)));
    Kokkos::parallel_for("reserve_column_sum_scratch", policy, KOKKOS_LAMBDA(const Member&) {});
  }
}

// The same sums as column_sum's teams, in the same order (each column: a row block's rows in row
// order, then the blocks in block order: a plain sum's bits; a product may contract into FMAs
// differently), as two flat kernels -- a thread a (row
// block, column), columns fastest so a warp reads consecutive values of a row, its sum into the
// block sums; then a thread a column adding its blocks. What a GPU runs; the host's tests run it too.
template <class T, class F>
void column_sum_by_blocks(const char* label, Vec<T> out, int N, int C, const F& f) {
  const int rows = column_sum_rows_per_block(N), R = column_sum_row_blocks(N);
  detail::grow_column_sum_parts<T>(size_t(R) * size_t(C));
  const Vec<T> part(detail::column_sum_parts<T>().data(), size_t(R) * size_t(C));
  count_traffic(bytes_of(part), bytes_of(part));  // (the caller counts what f reads)
  Kokkos::parallel_for(
      label, IndexRange(0, int64_t(R) * C), KOKKOS_LAMBDA(int64_t i) {
        const int r = int(i / C), c = int(i % C), n0 = r * rows, n1 = n0 + rows < N ? n0 + rows : N;
        T acc = 0;
        for (int n = n0; n < n1; ++n) acc += f(n, c);
        part(i) = acc;
      });
  Kokkos::parallel_for(
      "column_sum_blocks", IndexRange(0, C), KOKKOS_LAMBDA(int64_t c) {
        T s = 0;
        for (int r = 0; r < R; ++r) s += part(int64_t(r) * C + c);
        out(c) += s;
      });
}

template <class T, class F>
void column_sum(const char* label, Vec<T> out, int N, int C, const F& f) {
  if constexpr (!kHostExec) {
    column_sum_by_blocks<T>(label, out, N, C, f);
    return;
  }
  constexpr int W = kColumnBlock;
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const int rows = column_sum_rows_per_block(N), R = column_sum_row_blocks(N);
  auto policy = team_policy<ExecSpace>((C + W - 1) / W);
  policy.set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(R * W)));
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const Member& team) {
        const Scratch part(team.team_scratch(0), R * W);
        const int c0 = team.league_rank() * W, w = c0 + W <= C ? W : C - c0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, R), [&](int r) {
          const int n0 = r * rows, n1 = n0 + rows < N ? n0 + rows : N;
          T acc[W] = {};
          if (w == W) {
            for (int n = n0; n < n1; ++n)
              for (int k = 0; k < W; ++k) acc[k] += f(n, c0 + k);
          } else {
            for (int n = n0; n < n1; ++n)
              for (int k = 0; k < w; ++k) acc[k] += f(n, c0 + k);
          }
          for (int k = 0; k < W; ++k) part(r * W + k) = acc[k];
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](int k) {
          T s = 0;
          for (int r = 0; r < R; ++r) s += part(r * W + k);
          out(c0 + k) += s;
        });
      });
}

}  // namespace gpt2
