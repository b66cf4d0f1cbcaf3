#include "core/error.hpp"
#include "modules/comm/mpi_communicator.hpp"
#if defined(GPT2_HAVE_NCCL)
#include "modules/comm/nccl_communicator.hpp"
#endif

namespace gpt2 {

std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm) {
  if (backend == "mpi") return std::make_unique<MpiCommunicator>(comm);
  if (backend == "nccl") {
#if defined(GPT2_HAVE_NCCL)
    return std::make_unique<NcclCommunicator>(comm);
#else
    fail_input("parallel.comm", "nccl needs a CUDA build (GPT2_ENABLE_CUDA=ON); use mpi");
#endif
  }
  fail_input("parallel.comm", "expected auto, mpi or nccl, got \"", backend, "\"");
}

}  // namespace gpt2
