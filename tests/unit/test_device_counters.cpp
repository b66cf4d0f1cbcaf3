// The device counters (tensor/device_counters) see what they are there for: a deliberate fence of
// the whole device and of one execution space, an allocation and its free, a copy between device
// memory and pageable host memory (and not a fill, nor a copy with page-locked memory), a kernel
// launch, and a launch whose closure is large enough that CUDA's backend waits on the host for it.
// Counters that read 0 whatever the code does would let every check of a step's waits pass.
#include <gtest/gtest.h>

#include "tensor/device_counters.hpp"
#include "tensor/views.hpp"

using namespace gpt2;

namespace {
template <class F>
DeviceCounters counted(F&& f) {
  const DeviceCounters before = device_counters();
  f();
  return device_counters() - before;
}

// Two launches: a small closure, and (Large) one of 4 KiB, above what CUDA passes as kernel arguments.
// (Outside the test's body: nvcc allows no device lambda in a class's private member function.)
void launch_small(const Vec<float>& out) {
  Kokkos::parallel_for("small", IndexRange(0, int64_t(out.extent(0))), KOKKOS_LAMBDA(int64_t i) { out(i) = 2.0f; });
}
struct Large {
  Vec<float> out;
  float pad[1024];
  KOKKOS_INLINE_FUNCTION void operator()(int i) const { out(i) = pad[i % 1024]; }
};
}  // namespace

TEST(DeviceCounters, SeeEveryWaitAllocationCopyAndLaunch) {
  ASSERT_TRUE(install_device_counters()) << "a Kokkos tools library holds the callbacks";
  ASSERT_TRUE(device_fences_reported())
      << "this Kokkos reports no fences (built without cmake/patches/kokkos-3.4.01-fence-hooks.patch)";
  EXPECT_EQ(counted([] { Kokkos::fence(); }).device_waits, 1u);
  const DeviceCounters instance = counted([] { ExecSpace().fence(); });
  EXPECT_EQ(instance.stream_waits, 1u);
  EXPECT_EQ(instance.device_waits, 0u);

  Buffer<float> b;
  const DeviceCounters made = counted([&] { b = Buffer<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "b"), 64); });
  EXPECT_EQ(made.allocations, 1u);
  EXPECT_EQ(made.stream_waits + made.device_waits, 0u) << "an uninitialised allocation fences";
  EXPECT_EQ(counted([&] { b = Buffer<float>(); }).frees, 1u);
  b = Buffer<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "b"), 64);

  const DeviceCounters fill = counted([&] { Kokkos::deep_copy(ExecSpace(), b, 1.0f); });
  EXPECT_EQ(fill.deep_copies, 1u);
  EXPECT_EQ(fill.host_copies, 0u) << "a fill is no copy from the host";
  EXPECT_EQ(fill.stream_waits, 0u) << "the host backend's own fences around a copy are not the code's waits";
  std::vector<float> pageable(64);
  using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  EXPECT_EQ(counted([&] { Kokkos::deep_copy(ExecSpace(), HostFloats(pageable.data(), 64), b); }).host_copies, 1u);
  EXPECT_EQ(counted([&] { Kokkos::deep_copy(ExecSpace(), b, HostFloats(pageable.data(), 64)); }).host_copies, 1u);
  PinnedBuffer<float> pinned("pinned", 64);
  EXPECT_EQ(counted([&] { Kokkos::deep_copy(ExecSpace(), pinned, b); }).host_copies, 0u);
  EXPECT_EQ(counted([&] { Kokkos::deep_copy(ExecSpace(), b, pinned); }).host_copies, 0u);
  // A host mirror of device data is host memory of its own, as on a GPU.
  auto mirror = Kokkos::create_mirror_view(b);
  EXPECT_NE(mirror.data(), b.data());
  EXPECT_EQ(counted([&] { Kokkos::deep_copy(ExecSpace(), mirror, b); }).host_copies, 1u);

  const Vec<float> out(b.data(), 64);
  const DeviceCounters small = counted([&] { launch_small(out); });
  EXPECT_EQ(small.launches, 1u);
  EXPECT_EQ(small.stream_waits, 0u);
  Large large{out, {}};
  const DeviceCounters waits = counted([&] { Kokkos::parallel_for("large", IndexRange(0, 64), large); });
  EXPECT_EQ(waits.launches, 1u);
  EXPECT_EQ(waits.stream_waits, 1u) << "a closure of " << sizeof(Large) << " bytes launched without a counted wait";
}
