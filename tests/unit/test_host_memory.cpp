// Large host buffers are advised onto transparent huge pages before their first touch
// (cmake/patches/kokkos-3.4.01-host-huge-pages.patch): the kernel marks such a mapping "hg" in
// /proc/self/smaps. Without the advice, on a system whose huge pages are left to madvise, the
// optimizer and the products stream 4 KiB pages (tests/bench/README.md, "Huge pages").
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "tensor/views.hpp"

using namespace gpt2;

#if !defined(KOKKOS_ENABLE_CUDA)
namespace {
// The VmFlags of the mapping that holds address p ("" if /proc/self/smaps gives none).
std::string vm_flags_at(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;  // a mapping's first line: "begin-end perms offset ..."
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8);
    }
  }
  return "";
}
}  // namespace
#endif

TEST(HostMemory, LargeBuffersAreAdvisedOntoHugePages) {
#if defined(KOKKOS_ENABLE_CUDA)
  GTEST_SKIP() << "device memory: no host pages";
#else
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "a kernel without huge pages";
  const Buffer<float> big(Kokkos::view_alloc(Kokkos::WithoutInitializing, "big"), size_t(8) << 20);  // 32 MiB
  const std::string flags = vm_flags_at(big.data() + big.extent(0) / 2);
  if (flags.empty()) GTEST_SKIP() << "/proc/self/smaps shows no VmFlags for the buffer's mapping (a sandboxed /proc)";
  EXPECT_NE((flags + " ").find(" hg "), std::string::npos)
      << "a 32 MiB buffer is not advised onto huge pages (VmFlags:" << flags
      << "): Kokkos built without cmake/patches/kokkos-3.4.01-host-huge-pages.patch (an install made "
         "before it: job_scripts/build_kokkos.sh BACKEND rebuilds it, then build this project again)";
#endif
}
