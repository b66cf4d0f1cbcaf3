// parallel.comm = "auto" (modules/comm/auto.hpp). The fallback to MPI in a CUDA build is said once
// per node: MPI stages every message through host memory, far slower than NCCL.
#include "modules/comm/auto.hpp"

#include <cstdio>

#include <Kokkos_Core.hpp>

#include "plugins/communicator.hpp"

namespace gpt2 {

std::string auto_backend(bool nccl_built, int ranks_on_node, int gpus_on_node, std::string* why) {
  if (!nccl_built) return "mpi";
  if (ranks_on_node <= gpus_on_node) return "nccl";
  if (why)
    *why = "parallel.comm = \"auto\": " + std::to_string(ranks_on_node) + " ranks on this node but " +
           std::to_string(gpus_on_node) +
           " GPU(s) visible to them (NCCL needs a GPU a rank): using mpi, which stages every message "
           "through host memory; start one rank per GPU for nccl";
  return "mpi";
}

namespace {
std::string choose(const CommContext& ctx) {
#if defined(GPT2_HAVE_NCCL)
  const int gpus = ctx.gpus >= 0 ? ctx.gpus : int(Kokkos::Cuda::detect_device_count());
  std::string why;
  const std::string name = auto_backend(true, ctx.local_size, gpus, &why);
  if (!why.empty() && ctx.local_rank == 0) std::fprintf(stderr, "gpt2: %s\n", why.c_str());
  return name;
#else
  return auto_backend(false, ctx.local_size, ctx.gpus, nullptr);
#endif
}

[[maybe_unused]] const bool registered = CommRegistry::add(
    {"auto", "nccl in CUDA builds when every rank on the node has its own GPU, else mpi", 0, nullptr, choose, 1.0, {}});
}  // namespace

}  // namespace gpt2
