// parallel.comm = "auto": NCCL where the build has it and every rank on the node has a GPU of its
// own (NCCL refuses two ranks on one GPU), MPI otherwise.
#include <Kokkos_Core.hpp>

#include "runtime/communicator.hpp"

namespace gpt2 {

namespace {
std::string choose(const CommContext& ctx) {
#if defined(GPT2_HAVE_NCCL)
  const int devices = int(Kokkos::Cuda::detect_device_count());
  return ctx.local_size <= devices ? "nccl" : "mpi";
#else
  (void)ctx;
  return "mpi";
#endif
}

[[maybe_unused]] const bool registered = CommRegistry::add(
    {"auto", "nccl in CUDA builds when every rank on the node has its own GPU, else mpi", 0, nullptr, choose, 1.0});
}  // namespace

}  // namespace gpt2
