#include "runtime/topology.hpp"

#include <initializer_list>

namespace gpt2 {

int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

std::string GridShape::describe() const {
  return "dp " + std::to_string(dp) + " x pp " + std::to_string(pp) + " x tp " + std::to_string(tp);
}

Topology::Topology(MPI_Comm world, GridShape shape) : world_(world), shape_(shape) {
  MPI_Comm_rank(world, &rank_);
  coords_ = coords_of(shape_, rank_);
  const GridCoords& c = coords_;
  // Colour = the coordinates the group's members share; key = the coordinate that varies.
  MPI_Comm_split(world, c.pp * shape.tp + c.tp, c.dp, &dp_comm_);
  MPI_Comm_split(world, c.dp * shape.tp + c.tp, c.pp, &pipe_comm_);
  MPI_Comm_split(world, c.dp * shape.pp + c.pp, c.tp, &tp_comm_);
  // tied: a replica's first and last stage together; every other rank alone.
  const bool ends = first_stage() || last_stage();
  const int colour = ends ? c.dp * shape.tp + c.tp : int(shape.world()) + rank_;
  MPI_Comm_split(world, colour, c.pp, &tied_comm_);
}

Topology::~Topology() {
  for (MPI_Comm* c : {&dp_comm_, &pipe_comm_, &tp_comm_, &tied_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace gpt2
