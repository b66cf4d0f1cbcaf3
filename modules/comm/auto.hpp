#pragma once
// parallel.comm = "auto": NCCL where the build has it and every rank on the node has a GPU of its
// own (NCCL refuses two ranks on one GPU), MPI otherwise.
#include <string>

namespace gpt2 {

// The backend auto stands for; when it falls back to host-staged MPI in a build that has NCCL,
// `why` says so (otherwise it is left empty).
std::string auto_backend(bool nccl_built, int ranks_on_node, int gpus_on_node, std::string* why);

}  // namespace gpt2
