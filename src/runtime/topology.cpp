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

const char* axis_name(Axis a) {
  static const char* names[] = {"dp", "pp", "cp", "tp"};
  return names[int(a)];
}

long long GridShape::world() const {
  long long n = 1;
  for (Axis a : kAxes) n *= (*this)[a];
  return n;
}

std::string GridShape::describe() const {
  std::string out;
  for (Axis a : kAxes)
    if (a != Axis::cp || (*this)[a] != 1)
      out += (out.empty() ? "" : " x ") + std::string(axis_name(a)) + " " + std::to_string((*this)[a]);
  return out;
}

int Topology::rank_of(const GridShape& s, const GridCoords& c) {
  int r = 0;
  for (Axis a : kAxes) r = r * s[a] + c[a];
  return r;
}

GridCoords Topology::coords_of(const GridShape& s, int rank) {
  GridCoords c;
  for (auto a = kAxes.rbegin(); a != kAxes.rend(); ++a) {  // innermost first
    c[*a] = rank % s[*a];
    rank /= s[*a];
  }
  return c;
}

Topology::Topology(MPI_Comm world, GridShape shape) : world_(world), shape_(shape) {
  MPI_Comm_rank(world, &rank_);
  coords_ = coords_of(shape_, rank_);
  // The group along an axis: colour = the rank with that coordinate at 0 (what the members share),
  // key = the coordinate.
  for (Axis a : kAxes) {
    GridCoords shared = coords_;
    shared[a] = 0;
    MPI_Comm_split(world, rank_of(shape_, shared), coords_[a], &along_[size_t(a)]);
  }
  // tied: a replica's first and last stage together; every other rank alone.
  GridCoords first = coords_;
  first.pp = 0;
  const bool ends = first_stage() || last_stage();
  const int colour = ends ? rank_of(shape_, first) : int(shape_.world()) + rank_;
  MPI_Comm_split(world, colour, coords_.pp, &tied_comm_);
  // replicas: the ranks that hold the same parameters, dp x cp (key: dp_rank * cp + cp_rank).
  GridCoords shared = coords_;
  shared.dp = 0, shared.cp = 0;
  MPI_Comm_split(world, rank_of(shape_, shared), coords_.dp * shape_.cp + coords_.cp, &replicas_comm_);
}

Topology::~Topology() {
  for (MPI_Comm& c : along_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (tied_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tied_comm_);
  if (replicas_comm_ != MPI_COMM_NULL) MPI_Comm_free(&replicas_comm_);
}

}  // namespace gpt2
