#pragma once
// The one place that waits for the whole device: every execution-space instance and every stream
// (communicators' included). Counted, so a trace can say how many a step made (/meta
// device_syncs_per_step). Inside a step, work is ordered by the execution space instead -- a
// space's deep_copy, kernels in issue order, stream-ordered communicators -- and the host waits
// once, to read the step's loss and gradient norm. tests/structure/check_device_sync.py keeps raw
// Kokkos::fence() and space-less deep_copy out of the step's code.
#include <cstdint>

namespace gpt2 {

void device_sync(const char* why);  // Kokkos::fence(why), counted
uint64_t device_sync_count();        // calls so far, on this rank

}  // namespace gpt2
