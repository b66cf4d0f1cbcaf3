#pragma once
// What the device was asked to do, counted where it happens: Kokkos' tools callbacks see every
// fence (Kokkos::fence() and the ones Kokkos inserts itself, e.g. in a deep_copy without an
// execution space; Kokkos 3.4 reports fences through cmake/patches/kokkos-3.4.01-fence-hooks.patch,
// and launches that wait on the host through kokkos-3.4.01-launch-waits.patch), every kernel launch,
// every allocation and free through Kokkos, and every deep copy -- among them the copies between
// device memory and plain (pageable) host memory, which block the host on a GPU (the host build
// models device and page-locked memory as spaces of their own: tensor/device_memory.hpp). The
// communicators add the host's waits for a communication (Communicator::wait). A training step --
// step 1 included -- is held to at most one whole-device wait and no other host wait of any kind,
// no allocation and no free (the trainer records the most of any step in the trace's /meta).
#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

struct DeviceCounters {
  uint64_t device_waits = 0;   // global fences: the whole device, every stream (Kokkos::fence)
  uint64_t stream_waits = 0;   // an execution-space instance's fence, or a launch that waits: the host waits for a stream
  uint64_t host_waits = 0;     // the host blocked on a communication (Communicator::wait)
  uint64_t host_copies = 0;    // copies between device memory and pageable host memory (each blocks the host on a GPU)
  uint64_t allocations = 0;    // Kokkos allocations (a new View, kokkos_malloc)
  uint64_t frees = 0;          // and their frees
  uint64_t deep_copies = 0;    // Kokkos::deep_copy calls (fills included), with or without an execution space
  uint64_t launches = 0;       // kernels launched (parallel_for / reduce / scan)
  uint64_t bytes_moved = 0;    // what the kernels, GEMMs and copies declare they read and write (tensor/traffic.hpp)
  DeviceCounters operator-(const DeviceCounters& o) const;
  // Every host-blocking wait but the one whole-device wait a step may make.
  uint64_t other_host_waits() const { return stream_waits + host_waits + host_copies; }
};

// Installs the callbacks (once, after Kokkos::initialize, on the thread that runs the steps: only its
// Kokkos work is counted, not a background checkpoint's) and checks that this Kokkos reports
// fences (a Kokkos built without the patch does not: then no fence is ever counted); false when a
// Kokkos tools library (KOKKOS_PROFILE_LIBRARY / KOKKOS_TOOLS_LIBS) holds them: nothing is counted.
bool install_device_counters();
bool device_counters_installed();
// Whether the counts can be trusted: installed, and a deliberate fence at installation was seen.
// Checks of a step's waits must refuse to run where this is false (they would pass whatever the
// code does).
bool device_fences_reported();
DeviceCounters device_counters();  // totals so far on this process
void count_host_wait();            // a Communicator's host-blocking wait
// The most memory allocated through Kokkos at once since the callbacks were installed, every
// memory space and thread together: the model's state, activations and workspaces.
uint64_t peak_kokkos_bytes();
// The events a step must not make but one whole-device wait (allocations, frees, fences, host copies,
// host waits), numbered from 0 in the order they happened: how many so far, and the newest of them
// from number `since` on (at most 32, oldest first) -- what to look at when a step makes one.
uint64_t device_event_count();
std::vector<std::string> recent_device_events(uint64_t since = 0);

// The most of each count any step made, step 1 included (it runs after set-up, which sizes every
// workspace). Bracket each step with begin_step() and end_step().
class StepCounts {
 public:
  void begin_step() {
    start_ = device_counters();
    first_event_ = device_event_count();
  }
  void end_step();
  const DeviceCounters& maxima() const { return max_; }
  int64_t steps() const { return steps_; }
  // The events (recent_device_events) of the first step that allocated, freed or waited on the host
  // beyond its one whole-device wait (empty: none did).
  const std::vector<std::string>& events() const { return events_; }
  int64_t first_step() const { return first_step_; }  // the step (1-based) those events are of; 0: none

 private:
  DeviceCounters start_, max_;
  uint64_t first_event_ = 0;
  int64_t steps_ = 0, first_step_ = 0;
  std::vector<std::string> events_;
};

}  // namespace gpt2
