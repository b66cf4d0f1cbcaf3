#pragma once
// Workspaces of a few sizes, reused from step to step so that no step allocates (an allocation on a
// GPU is a cudaMalloc, a free a cudaFree that waits for the whole device, and Kokkos 3.4 copies each
// new View's header synchronously). Their owners reserve() what a step needs at set-up, from the
// sizes the run will use; a request with none free first asks `reclaim` to return one still held by
// an operation in flight (it completes the oldest such operation: a stream dependency, not a host
// wait), and only grows the pool when nothing is in flight -- a reservation that fell short, which
// the device counters report as an allocation in a step. A size nobody reserved gets `spare`
// buffers at its first request (work outside the step: evaluation of another shape, tools).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/views.hpp"

namespace gpt2 {

template <class T>
class BufferPool {
 public:
  explicit BufferPool(std::string label, int spare = 2) : label_(std::move(label)), spare_(spare) {}

  // reclaim(): gives a buffer back to the pool (through give()) if it can; false when nothing is
  // in flight.
  Buffer<T> take(size_t n, const std::function<bool()>& reclaim = {}) {
    std::vector<Buffer<T>>& free = free_[n];
    if (free.empty() && made_[n] == 0)
      for (int i = 0; i < spare_; ++i) free.push_back(make(n));
    while (free.empty() && reclaim && reclaim()) {
    }
    if (free.empty()) return make(n);
    Buffer<T> b = std::move(free.back());
    free.pop_back();
    return b;
  }
  // At least `count` buffers of n elements exist (made now, free): set-up's reservation.
  void reserve(size_t n, int count) {
    if (n == 0) return;
    std::vector<Buffer<T>>& free = free_[n];
    while (made_[n] < count) free.push_back(make(n));
  }
  int made(size_t n) const {
    auto it = made_.find(n);
    return it == made_.end() ? 0 : it->second;
  }
  void give(Buffer<T> b) {
    if (b.extent(0)) free_[b.extent(0)].push_back(std::move(b));
  }
  size_t bytes() const { return bytes_; }  // everything the pool made
  void clear() { free_.clear(), made_.clear(), bytes_ = 0; }  // (buffers in use stay with their users)

 private:
  Buffer<T> make(size_t n) {
    ++made_[n];
    bytes_ += n * sizeof(T);
    return uninitialized<T>(label_, n);
  }
  std::string label_;
  int spare_;
  std::map<size_t, std::vector<Buffer<T>>> free_;
  std::map<size_t, int> made_;
  size_t bytes_ = 0;
};

}  // namespace gpt2
