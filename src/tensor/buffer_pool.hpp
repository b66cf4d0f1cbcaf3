#pragma once
// Workspaces of a few sizes, reused from step to step so that a steady-state step allocates nothing
// (an allocation on a GPU is a cudaMalloc, and Kokkos 3.4 copies each new View's header
// synchronously). The first request for a size makes `spare` buffers of it at once; afterwards a
// request with none free first asks `reclaim` to return one still held by an operation in flight
// (it completes the oldest such operation: a stream dependency, not a host wait), and only grows the
// pool when nothing is in flight -- when more buffers of the size are in use at once than the pool
// has, which the compute order decides: the first step then makes them, every later step finds them.
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
  void give(Buffer<T> b) {
    if (b.extent(0)) free_[b.extent(0)].push_back(std::move(b));
  }
  size_t bytes() const { return bytes_; }  // everything the pool made
  void clear() { free_.clear(), made_.clear(), bytes_ = 0; }  // (buffers in use stay with their users)

 private:
  Buffer<T> make(size_t n) {
    ++made_[n];
    bytes_ += n * sizeof(T);
    return Buffer<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), n);
  }
  std::string label_;
  int spare_;
  std::map<size_t, std::vector<Buffer<T>>> free_;
  std::map<size_t, int> made_;
  size_t bytes_ = 0;
};

}  // namespace gpt2
