#pragma once
// An index table for tensor/indexed_copy.hpp's one-kernel packs, to the device at set-up.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device_sync.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

inline Buffer<int32_t> index_table(const char* name, const std::vector<int32_t>& v) {
  Buffer<int32_t> out = uninitialized<int32_t>(name, v.size());
  Kokkos::deep_copy(ExecSpace(), out, Kokkos::View<const int32_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(v.data(), v.size()));
  device_sync("an index table to the device");  // (`v` goes next; built once, before the first step)
  return out;
}

}  // namespace gpt2
