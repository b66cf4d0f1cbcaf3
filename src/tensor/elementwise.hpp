#pragma once
// for_each_index(name, n, f): f(i) for every i in [0, n), each i independent of the others (no i
// reads what another writes). On a GPU one index per thread. On the host a work item is a run of
// consecutive indices, and its loop is marked free of loop-carried dependencies: the views f reads
// and writes through are separate pointers the compiler cannot tell apart, so without the mark it
// keeps the loop scalar (AdamW ran at 1/4 of the memory bandwidth). On OpenMP each thread starts on
// its own share of the runs and takes runs from another's share when done (Kokkos' dynamic
// schedule): a core slowed by another process -- a shared box, a virtual machine's vCPU -- does not
// leave the others waiting at the end (AdamW over 124M parameters, a busy loop on one of two cores:
// 0.84x).
#include <cstdint>

#include "tensor/views.hpp"

namespace gpt2 {

template <class F>
void for_each_index(const char* name, int64_t n, const F& f) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    constexpr int64_t kRun = 8192;  // 32 KiB of floats: long vector loops, enough runs to share out
#if defined(KOKKOS_ENABLE_OPENMP)
    using Schedule = Kokkos::Dynamic;
#else  // (the Threads backend's work stealing copies a volatile pair unguarded: ThreadSanitizer's build)
    using Schedule = Kokkos::Static;
#endif
    using Runs = Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Schedule>, Kokkos::IndexType<int64_t>>;
    Kokkos::parallel_for(name, Runs(0, (n + kRun - 1) / kRun, Kokkos::ChunkSize(1)), [=](int64_t r) {
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
