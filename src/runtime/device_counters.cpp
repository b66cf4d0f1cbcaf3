#include "runtime/device_counters.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <Kokkos_Core.hpp>

namespace gpt2 {

namespace {
std::atomic<uint64_t> device_waits{0}, stream_waits{0}, host_waits{0}, allocations{0}, frees{0}, deep_copies{0};
bool installed = false;
std::mutex labels_mutex;
std::vector<std::string> labels;  // the newest allocations' labels, a ring of kLabels
size_t next_label = 0;
constexpr size_t kLabels = 8;

// Kokkos' tools callbacks (C signatures). A fence's device id is 0 for a global fence (the patch's
// fence_global), its backend's id for an instance fence.
void on_begin_fence(const char*, const uint32_t device_id, uint64_t* handle) {
  ++(device_id == 0 ? device_waits : stream_waits);
  *handle = 0;
}
void on_end_fence(uint64_t) {}
void on_allocate(Kokkos_Profiling_SpaceHandle space, const char* label, const void*, uint64_t bytes) {
  ++allocations;
  std::lock_guard<std::mutex> lock(labels_mutex);
  std::string what = std::string(label) + " (" + std::to_string(bytes) + " bytes in " + space.name + ")";
  if (labels.size() < kLabels) labels.push_back(std::move(what));
  else labels[next_label % kLabels] = std::move(what);
  ++next_label;
}
void on_deallocate(Kokkos_Profiling_SpaceHandle, const char*, const void*, uint64_t) { ++frees; }
void on_begin_deep_copy(Kokkos_Profiling_SpaceHandle, const char*, const void*, Kokkos_Profiling_SpaceHandle,
                        const char*, const void*, uint64_t) {
  ++deep_copies;
}
void on_end_deep_copy() {}
}  // namespace

DeviceCounters DeviceCounters::operator-(const DeviceCounters& o) const {
  return {device_waits - o.device_waits, stream_waits - o.stream_waits, host_waits - o.host_waits,
          allocations - o.allocations,   frees - o.frees,               deep_copies - o.deep_copies};
}

bool install_device_counters() {
  if (installed) return true;
  if (std::getenv("KOKKOS_PROFILE_LIBRARY") || std::getenv("KOKKOS_TOOLS_LIBS")) return false;
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_begin_fence_callback(&on_begin_fence);
  tools::set_end_fence_callback(&on_end_fence);
  tools::set_allocate_data_callback(&on_allocate);
  tools::set_deallocate_data_callback(&on_deallocate);
  tools::set_begin_deep_copy_callback(&on_begin_deep_copy);
  tools::set_end_deep_copy_callback(&on_end_deep_copy);
  installed = true;
  return true;
}

bool device_counters_installed() { return installed; }

DeviceCounters device_counters() {
  return {device_waits.load(), stream_waits.load(), host_waits.load(),
          allocations.load(),  frees.load(),        deep_copies.load()};
}

void count_host_wait() { ++host_waits; }

std::vector<std::string> recent_allocations() {
  std::lock_guard<std::mutex> lock(labels_mutex);
  std::vector<std::string> out;
  for (size_t i = 0; i < labels.size(); ++i) out.push_back(labels[(next_label + i) % labels.size()]);
  return out;
}

void SteadyStepCounts::end_step() {
  if (steps_++ == 0) return;
  const DeviceCounters c = device_counters() - start_;
  if (c.allocations > 0 && allocations_.empty()) {  // the step's own: the newest c.allocations
    allocations_ = recent_allocations();
    if (allocations_.size() > c.allocations) allocations_.erase(allocations_.begin(), allocations_.end() - long(c.allocations));
  }
  max_.device_waits = std::max(max_.device_waits, c.device_waits);
  max_.stream_waits = std::max(max_.stream_waits, c.stream_waits);
  max_.host_waits = std::max(max_.host_waits, c.host_waits);
  max_.allocations = std::max(max_.allocations, c.allocations);
  max_.frees = std::max(max_.frees, c.frees);
  max_.deep_copies = std::max(max_.deep_copies, c.deep_copies);
}

}  // namespace gpt2
