#include "tensor/device_counters.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <Kokkos_Core.hpp>

#include "tensor/device_work.hpp"
#include "tensor/traffic.hpp"

namespace gpt2 {

namespace {
std::atomic<uint64_t> device_waits{0}, stream_waits{0}, host_waits{0}, host_copies{0}, allocations{0}, frees{0},
    deep_copies{0}, launches{0};
std::atomic<int64_t> live_bytes{0}, peak_bytes{0};  // Kokkos memory of every space and thread
bool installed = false, fences_seen = false;
std::mutex events_mutex;
std::vector<std::string> events;  // the newest notable events, a ring of kEvents
size_t next_event = 0;
constexpr size_t kEvents = 32;

void note(std::string what) {
  std::lock_guard<std::mutex> lock(events_mutex);
  if (events.size() < kEvents) events.push_back(std::move(what));
  else events[next_event % kEvents] = std::move(what);
  ++next_event;
}

// Memory spaces by the names Kokkos gives them: device memory (CUDA's, or the host build's model of
// it) and plain host memory. Page-locked host memory ("CudaHostPinned", "HostPinned") is neither:
// the device copies to and from it while the host goes on.
bool is_device(const char* space) { return !std::strcmp(space, "Device") || !std::strcmp(space, "Cuda"); }
bool is_pageable(const char* space) { return !std::strcmp(space, "Host"); }

// Kokkos' tools callbacks (C signatures). A fence's device id is 0 for a global fence (the patch's
// fence_global), a backend's id for an instance fence, fence_launch (5) for a launch that waits.
thread_local bool in_copy = false;  // between a deep copy's begin and end callbacks
constexpr uint32_t kCudaFenceId = 3;  // the fence-hooks patch's fence_cuda (a Kokkos without it has no name for it)
// The thread that runs the steps (the one that installed the counters): another's Kokkos work -- a
// background checkpoint's checksum on host threads -- is not the step's.
thread_local bool stepping_thread = false;

void on_begin_fence(const char* name, const uint32_t device_id, uint64_t* handle) {
  *handle = 0;
  if (!stepping_thread) return;
  // A host backend's copy with an execution space fences that space around itself (a no-op there;
  // on CUDA the same copy is an asynchronous cudaMemcpy): not a wait the code asked for.
  if (in_copy && device_id != 0 && device_id != kCudaFenceId) return;
  ++(device_id == 0 ? device_waits : stream_waits);
  note(std::string("fence: ") + name);
}
void on_end_fence(uint64_t) {}
void on_launch(const char*, uint32_t, uint64_t* id) {
  *id = 0;
  if (!stepping_thread) return;
  ++launches;
  device_work();  // (a host model of the device lets its stream catch up first)
}
void on_end_launch(uint64_t) {}
void on_allocate(Kokkos_Profiling_SpaceHandle space, const char* label, const void*, uint64_t bytes) {
  const int64_t now = live_bytes += int64_t(bytes);
  for (int64_t peak = peak_bytes.load(); now > peak && !peak_bytes.compare_exchange_weak(peak, now);) {
  }
  if (!stepping_thread) return;
  ++allocations;
  note("allocation: " + std::string(label) + " (" + std::to_string(bytes) + " bytes in " + space.name + ")");
}
void on_deallocate(Kokkos_Profiling_SpaceHandle space, const char* label, const void*, uint64_t bytes) {
  live_bytes -= int64_t(bytes);
  if (!stepping_thread) return;
  ++frees;
  note("free: " + std::string(label) + " (" + std::to_string(bytes) + " bytes in " + space.name + ")");
}
void on_begin_deep_copy(Kokkos_Profiling_SpaceHandle dst, const char* dst_label, const void*,
                        Kokkos_Profiling_SpaceHandle src, const char* src_label, const void*, uint64_t bytes) {
  in_copy = true;
  if (!stepping_thread) return;
  ++deep_copies;
  device_work();
  const bool fill = !std::strcmp(src_label, "Scalar") || !std::strcmp(src_label, "(none)");
  count_traffic(fill ? 0 : bytes, bytes);
  if (fill) return;
  if ((is_device(src.name) && is_pageable(dst.name)) || (is_pageable(src.name) && is_device(dst.name))) {
    ++host_copies;
    note("host copy: " + std::string(dst_label) + " (" + dst.name + ") <- " + src_label + " (" + src.name + "), " +
         std::to_string(bytes) + " bytes");
  }
}
void on_end_deep_copy() { in_copy = false; }
}  // namespace

DeviceCounters DeviceCounters::operator-(const DeviceCounters& o) const {
  return {device_waits - o.device_waits, stream_waits - o.stream_waits, host_waits - o.host_waits,
          host_copies - o.host_copies,   allocations - o.allocations,   frees - o.frees,
          deep_copies - o.deep_copies,   launches - o.launches,         bytes_moved - o.bytes_moved};
}

bool install_device_counters() {
  if (installed) return true;
  if (std::getenv("KOKKOS_PROFILE_LIBRARY") || std::getenv("KOKKOS_TOOLS_LIBS")) return false;
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_begin_fence_callback(&on_begin_fence);
  tools::set_end_fence_callback(&on_end_fence);
  tools::set_begin_parallel_for_callback(&on_launch);
  tools::set_end_parallel_for_callback(&on_end_launch);
  tools::set_begin_parallel_reduce_callback(&on_launch);
  tools::set_end_parallel_reduce_callback(&on_end_launch);
  tools::set_begin_parallel_scan_callback(&on_launch);
  tools::set_end_parallel_scan_callback(&on_end_launch);
  tools::set_allocate_data_callback(&on_allocate);
  tools::set_deallocate_data_callback(&on_deallocate);
  tools::set_begin_deep_copy_callback(&on_begin_deep_copy);
  tools::set_end_deep_copy_callback(&on_end_deep_copy);
  installed = true;
  stepping_thread = true;
  // A Kokkos that does not report fences would let every wait check pass: find out now.
  const uint64_t before = device_waits.load();
  Kokkos::fence();  // device_sync-ok: the counters' own check, at start-up
  fences_seen = device_waits.load() > before;
  return true;
}

bool device_counters_installed() { return installed; }
bool device_fences_reported() { return installed && fences_seen; }

DeviceCounters device_counters() {
  return {device_waits.load(), stream_waits.load(), host_waits.load(), host_copies.load(),
          allocations.load(),  frees.load(),        deep_copies.load(), launches.load(),
          traffic().total()};  // (this thread's: the stepping thread asks)
}

uint64_t peak_kokkos_bytes() { return uint64_t(peak_bytes.load()); }
void count_host_wait() {
  ++host_waits;
  note("host wait for a communication");
}

uint64_t device_event_count() {
  std::lock_guard<std::mutex> lock(events_mutex);
  return next_event;
}

std::vector<std::string> recent_device_events(uint64_t since) {
  std::lock_guard<std::mutex> lock(events_mutex);
  std::vector<std::string> out;
  const uint64_t first = std::max<uint64_t>(since, next_event - events.size());
  for (uint64_t i = first; i < next_event; ++i) out.push_back(events[i % kEvents]);
  return out;
}

void StepCounts::end_step() {
  ++steps_;
  const DeviceCounters c = device_counters() - start_;
  if (events_.empty() && (c.allocations || c.frees || c.device_waits > 1 || c.other_host_waits())) {
    events_ = recent_device_events(first_event_);
    first_step_ = steps_;
    if (events_.empty()) events_.push_back("(no event recorded)");
  }
  max_.device_waits = std::max(max_.device_waits, c.device_waits);
  max_.stream_waits = std::max(max_.stream_waits, c.stream_waits);
  max_.host_waits = std::max(max_.host_waits, c.host_waits);
  max_.host_copies = std::max(max_.host_copies, c.host_copies);
  max_.allocations = std::max(max_.allocations, c.allocations);
  max_.frees = std::max(max_.frees, c.frees);
  max_.deep_copies = std::max(max_.deep_copies, c.deep_copies);
  max_.launches = std::max(max_.launches, c.launches);
  max_.bytes_moved = std::max(max_.bytes_moved, c.bytes_moved);
}

}  // namespace gpt2
