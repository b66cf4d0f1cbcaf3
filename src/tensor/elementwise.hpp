#pragma once
// for_each_index(name, n, f): f(i) for every i in [0, n), each i independent of the others (no i
// reads what another writes). On a GPU one index per thread. On the host a work item is a run of
// consecutive indices, and its loop is marked free of loop-carried dependencies: the views f reads
// and writes through are separate pointers the compiler cannot tell apart, so without the mark it
// keeps the loop scalar (AdamW ran at 1/4 of the memory bandwidth).
#include <cstdint>

#include "tensor/views.hpp"

namespace gpt2 {

template <class F>
void for_each_index(const char* name, int64_t n, const F& f) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    constexpr int64_t kRun = 8192;  // 32 KiB of floats: long vector loops, enough runs to share out
    Kokkos::parallel_for(name, IndexRange(0, (n + kRun - 1) / kRun), [=](int64_t r) {
      const int64_t b = r * kRun, e = b + kRun < n ? b + kRun : n;
      const F local = f;  // a copy no store can reach: its scalars stay in registers through the loop
#pragma omp simd
      for (int64_t i = b; i < e; ++i) local(i);
    });
  } else {
    Kokkos::parallel_for(name, IndexRange(0, n), f);
  }
}

}  // namespace gpt2
