#pragma once
// Where the tensors live. On CUDA: device memory (CudaSpace), and page-locked host memory
// (CudaHostPinnedSpace) for what the host and the device exchange without the host waiting. On the
// host the same two are modelled as memory spaces of their own over host memory (Kokkos' logical
// spaces, "Device" and "HostPinned"): the same bytes and the same speed, but Kokkos names the space
// of every allocation and copy, so a step's copies between device memory and plain (pageable) host
// memory -- each a host-blocking wait on a GPU -- are seen and counted on the host too
// (tensor/device_counters). A host mirror of device data (create_mirror_view) is a separate host
// allocation, as on a GPU.
#include <Kokkos_Core.hpp>

namespace gpt2 {

#if defined(KOKKOS_ENABLE_CUDA)
using DeviceMemory = Kokkos::CudaSpace;
using PinnedMemory = Kokkos::CudaHostPinnedSpace;
#else
struct DeviceMemoryName {
  static constexpr const char* get_name() { return "Device"; }
};
struct PinnedMemoryName {
  static constexpr const char* get_name() { return "HostPinned"; }
};
using DeviceMemory =
    Kokkos::Experimental::LogicalMemorySpace<Kokkos::HostSpace, Kokkos::DefaultExecutionSpace, DeviceMemoryName>;
using PinnedMemory =
    Kokkos::Experimental::LogicalMemorySpace<Kokkos::HostSpace, Kokkos::DefaultHostExecutionSpace, PinnedMemoryName>;
#endif

}  // namespace gpt2

#if !defined(KOKKOS_ENABLE_CUDA)
// Kokkos 3.4 knows how a logical space relates to its base space, but not to another logical space
// or to the anonymous space (both partial specialisations match: ambiguous): these say it, and give
// device memory pageable host mirrors.
namespace Kokkos {
namespace Impl {
#define GPT2_SHARED_ACCESS(A, B, ASSIGNABLE) \
  template <>                               \
  struct MemorySpaceAccess<A, B> {          \
    enum { assignable = ASSIGNABLE };       \
    enum { accessible = true };             \
    enum { deepcopy = true };               \
  };
GPT2_SHARED_ACCESS(gpt2::DeviceMemory, gpt2::PinnedMemory, false)
GPT2_SHARED_ACCESS(gpt2::PinnedMemory, gpt2::DeviceMemory, false)
GPT2_SHARED_ACCESS(AnonymousSpace, gpt2::DeviceMemory, true)
GPT2_SHARED_ACCESS(gpt2::DeviceMemory, AnonymousSpace, true)
GPT2_SHARED_ACCESS(AnonymousSpace, gpt2::PinnedMemory, true)
GPT2_SHARED_ACCESS(gpt2::PinnedMemory, AnonymousSpace, true)
#undef GPT2_SHARED_ACCESS

// Copies between the modelled spaces and host memory are copies of host memory (Kokkos' own
// logical-space copies take a non-const source, which a copy from a const view cannot give).
#define GPT2_HOST_COPY(DST, SRC)                                                                                \
  template <class Exec>                                                                                       \
  struct DeepCopy<DST, SRC, Exec> {                                                                           \
    DeepCopy(void* dst, const void* src, size_t n) { DeepCopy<HostSpace, HostSpace, Exec>(dst, src, n); }    \
    DeepCopy(const Exec& e, void* dst, const void* src, size_t n) {                                           \
      DeepCopy<HostSpace, HostSpace, Exec>(e, dst, src, n);                                                   \
    }                                                                                                         \
  };
GPT2_HOST_COPY(gpt2::DeviceMemory, gpt2::DeviceMemory)
GPT2_HOST_COPY(gpt2::DeviceMemory, gpt2::PinnedMemory)
GPT2_HOST_COPY(gpt2::DeviceMemory, HostSpace)
GPT2_HOST_COPY(gpt2::PinnedMemory, gpt2::DeviceMemory)
GPT2_HOST_COPY(gpt2::PinnedMemory, gpt2::PinnedMemory)
GPT2_HOST_COPY(gpt2::PinnedMemory, HostSpace)
GPT2_HOST_COPY(HostSpace, gpt2::DeviceMemory)
GPT2_HOST_COPY(HostSpace, gpt2::PinnedMemory)
#undef GPT2_HOST_COPY

template <>
struct HostMirror<gpt2::DeviceMemory> {
  using Space = Kokkos::HostSpace;
};
}  // namespace Impl
}  // namespace Kokkos
#endif
