#include "runtime/topology.hpp"

#include <initializer_list>

namespace gpt2 {

Topology::Topology(MPI_Comm world, int dp, int pp) : dp_(dp), pp_(pp) {
  MPI_Comm_rank(world, &rank_);
  MPI_Comm_split(world, stage(), dp_rank(), &dp_comm_);
  MPI_Comm_split(world, dp_rank(), stage(), &pipe_comm_);
  const bool tied = pp > 1 && (first_stage() || last_stage());
  MPI_Comm_split(world, tied ? dp_rank() : MPI_UNDEFINED, stage(), &tied_comm_);
}

Topology::~Topology() {
  for (MPI_Comm* c : {&dp_comm_, &pipe_comm_, &tied_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace gpt2
