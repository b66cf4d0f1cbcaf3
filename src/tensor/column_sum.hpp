#pragma once
// Column reductions out(c) += sum_n f(n, c) over an (N, C) row-major matrix -- bias and LayerNorm
// parameter gradients. Each work item owns a block of columns and walks the rows in order
// (deterministic, no atomics). On the host a block is 16 contiguous columns, so every row is read
// as one cache line and the 16 sums vectorize; on a GPU a block is one column, and neighbouring
// threads read neighbouring addresses.
#include "tensor/views.hpp"

namespace gpt2 {

constexpr bool kHostExec = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
constexpr int kColumnBlock = kHostExec ? 16 : 1;

template <class T, class F>
void column_sum(const char* label, Vec<T> out, int N, int C, const F& f) {
  constexpr int W = kColumnBlock;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace>(0, (C + W - 1) / W), KOKKOS_LAMBDA(int blk) {
        const int c0 = blk * W;
        if (c0 + W <= C) {
          T acc[W] = {};
          for (int n = 0; n < N; ++n)
            for (int k = 0; k < W; ++k) acc[k] += f(n, c0 + k);
          for (int k = 0; k < W; ++k) out(c0 + k) += acc[k];
        } else {
          for (int c = c0; c < C; ++c) {
            T acc = 0;
            for (int n = 0; n < N; ++n) acc += f(n, c);
            out(c) += acc;
          }
        }
      });
}

}  // namespace gpt2
