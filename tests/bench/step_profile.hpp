#pragma once
// Per-operation times of training steps, for the benchmarks' kernel tables. Every Kokkos kernel (by
// its label, through Kokkos Tools callbacks) and every library GEMM (by its shape, through
// set_gemm_observer) is one operation. On CUDA each is timed on the device's own clock: a pair of
// events on Kokkos' stream around it, no fence added, and the device's idle time between one
// operation's end and the next one's start is the launch gap. On the host each is fenced and timed
// by the clock. On CUDA each operation is also an NVTX range named as in the table, so a kernel
// profiler (ncu --nvtx --print-nvtx-rename kernel) reports the same names.
#include <cstdio>
#include <string>

namespace gpt2::bench {

// Runs `steps` calls of `step` under the profile and writes the table to `path` as JSON: per
// operation name, calls and milliseconds per step; for GEMMs their shape and dtypes; the idle time
// between operations, in total and by the operation that follows it. Not reentrant; `context` is
// copied into the JSON's top level as is (a fragment like "\"B\": 16, ").
void profile_steps(const char* path, int steps, const std::string& context, void (*step)(void*), void* arg);

template <class Step>
void profile_steps(const char* path, int steps, const std::string& context, Step& step) {
  profile_steps(path, steps, context, [](void* s) { (*static_cast<Step*>(s))(); }, &step);
}

}  // namespace gpt2::bench
