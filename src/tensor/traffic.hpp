#pragma once
// The bytes each kernel moves through device memory, declared by the kernel beside its launch from
// the views it reads and writes (each element once: what stays in cache or team scratch is not
// counted again). A step's sum is the trace's /meta bytes_moved_per_step: the memory traffic the
// step's non-GEMM passes and GEMM operands cost on a GPU, the number a fused path must lower.
// Counted per issuing thread (a background checkpoint's copies do not count in a step's).
#include <cstdint>

namespace gpt2 {

struct Traffic {
  uint64_t read = 0, written = 0;
  uint64_t total() const { return read + written; }
  Traffic operator-(const Traffic& o) const { return {read - o.read, written - o.written}; }
};

void count_traffic(uint64_t read, uint64_t written);
Traffic traffic();  // this thread's totals so far

// The bytes of views (any with size() and value_type), for count_traffic's arguments.
template <class V>
uint64_t bytes_of(const V& v) {
  return uint64_t(v.size()) * sizeof(typename V::value_type);
}
template <class V, class... Rest>
uint64_t bytes_of(const V& v, const Rest&... rest) {
  return bytes_of(v) + bytes_of(rest...);
}

}  // namespace gpt2
