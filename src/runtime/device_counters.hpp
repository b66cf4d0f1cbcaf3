#pragma once
// What the device was asked to do, counted where it happens: Kokkos' tools callbacks see every
// fence (Kokkos::fence() and the ones Kokkos inserts itself, e.g. in a deep_copy without an
// execution space or a View's initialisation; Kokkos 3.4 reports fences through the patch
// cmake/patches/kokkos-3.4.01-fence-hooks.patch), every allocation and free of device or host
// memory through Kokkos, and every deep copy. The communicators add the host's waits for a
// communication (Communicator::wait). A training step is held to at most one whole-device wait,
// no host wait for a communication and no allocation or free once it is in its steady state (the
// trainer records the most of any step from step 2 in the trace's /meta).
#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

struct DeviceCounters {
  uint64_t device_waits = 0;   // global fences: the whole device, every stream (Kokkos::fence)
  uint64_t stream_waits = 0;   // an execution-space instance's fence: the host waits for one stream
  uint64_t host_waits = 0;     // the host blocked on a communication (Communicator::wait)
  uint64_t allocations = 0;    // Kokkos allocations (a new View, kokkos_malloc)
  uint64_t frees = 0;          // and their frees
  uint64_t deep_copies = 0;    // Kokkos::deep_copy calls, with or without an execution space
  DeviceCounters operator-(const DeviceCounters& o) const;
};

// Installs the callbacks (once, after Kokkos::initialize); false when a Kokkos tools library
// (KOKKOS_PROFILE_LIBRARY / KOKKOS_TOOLS_LIBS) holds them: then nothing is counted.
bool install_device_counters();
bool device_counters_installed();
DeviceCounters device_counters();  // totals so far on this process
void count_host_wait();            // a Communicator's host-blocking wait
// The labels of the most recent allocations (newest last, at most 8): what to look at when a step
// allocates.
std::vector<std::string> recent_allocations();

// The most of each count one steady-state step made: every step of a process but its first (which
// sizes the workspaces). Bracket each step with begin_step() and end_step().
class SteadyStepCounts {
 public:
  void begin_step() { start_ = device_counters(); }
  void end_step();
  const DeviceCounters& maxima() const { return max_; }
  // The labels of the latest allocations of the first steady step that allocated (empty: none).
  const std::vector<std::string>& allocations() const { return allocations_; }

 private:
  DeviceCounters start_, max_;
  int64_t steps_ = 0;
  std::vector<std::string> allocations_;
};

}  // namespace gpt2
