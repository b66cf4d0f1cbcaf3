// Registers the NCCL backend (nccl_communicator.cpp, CUDA builds). A host build registers the name
// too, so that asking for it says what is missing instead of "unknown backend".
#include "core/error.hpp"
#include "plugins/communicator.hpp"
#if defined(GPT2_HAVE_NCCL)
#include "modules/comm/nccl_communicator.hpp"
#endif

namespace gpt2 {

namespace {
std::unique_ptr<Communicator> make_nccl(MPI_Comm c) {
#if defined(GPT2_HAVE_NCCL)
  return std::make_unique<NcclCommunicator>(c);
#else
  (void)c;
  fail_input("parallel.comm", "nccl needs a CUDA build (GPT2_ENABLE_CUDA=ON); use mpi");
#endif
}

CommBackend nccl_backend() {
  CommBackend b{"nccl", "NCCL on device buffers, collectives and sends on streams of their own (CUDA builds)", 2,
                make_nccl, [](const CommContext&) { return std::string("nccl"); },
                // NCCL runs on its own stream and prefers fewer, larger buckets.
                25.0, {}};
#if defined(GPT2_HAVE_NCCL)
  b.init_together = &NcclCommunicator::init_together;
#endif
  return b;
}

[[maybe_unused]] const bool registered = CommRegistry::add(nccl_backend());
}  // namespace

}  // namespace gpt2
