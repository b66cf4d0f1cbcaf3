#pragma once
// The parallel grid and its groups. The grid is a list of named axes, outermost first -- picotron's
// arange(world).view(dp, pp, cp, tp):
//   world rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank
// so a tensor-parallel group is tp consecutive ranks (one node when tp divides the GPUs per node),
// and one replica's pipeline is pp * cp * tp consecutive ranks. Coordinates and groups are derived
// from the list; each rank's coordinates are computed once. The groups, each an MPI communicator
// here (made into Communicators by CommGroups):
//   along each axis  ranks that differ only in that coordinate: dp (gradient averaging / sharding),
//                    pp ("pipe": activations between stages; rank in it == stage), cp (context
//                    parallelism: the ring attention's K/V blocks), tp (tensor-parallel collectives)
//   tied             the first and the last stage of one (dp, cp, tp): the tied wte gradient; just
//                    this rank on other stages, and when pp = 1
//   replicas         dp x cp: the ranks that hold the same parameters (context-parallel ranks see
//                    other tokens of the same sequences): gradient averaging, ZeRO sharding, loss
//                    sums; the dp group when cp = 1
#include <mpi.h>

#include <array>
#include <string>

namespace gpt2 {

enum class Axis { dp, pp, cp, tp };
constexpr std::array<Axis, 4> kAxes = {Axis::dp, Axis::pp, Axis::cp, Axis::tp};  // outermost first
const char* axis_name(Axis a);  // "dp", "pp", "cp", "tp"

// One number per axis: a grid's sizes (GridShape) or a rank's coordinates (GridCoords).
struct AxisValues {
  int dp, pp, cp, tp;
  int operator[](Axis a) const { return a == Axis::dp ? dp : a == Axis::pp ? pp : a == Axis::cp ? cp : tp; }
  int& operator[](Axis a) { return a == Axis::dp ? dp : a == Axis::pp ? pp : a == Axis::cp ? cp : tp; }
};

struct GridShape : AxisValues {
  GridShape() : AxisValues{1, 1, 1, 1} {}
  GridShape(int dp_, int pp_, int cp_, int tp_) : AxisValues{dp_, pp_, cp_, tp_} {}  // every axis, in order
  long long world() const;
  std::string describe() const;  // "dp 2 x pp 2 x tp 1" (cp named when it is not 1)
};

struct GridCoords : AxisValues {
  GridCoords() : AxisValues{0, 0, 0, 0} {}
  GridCoords(int dp_, int pp_, int cp_, int tp_) : AxisValues{dp_, pp_, cp_, tp_} {}
};

// Rank and size of an MPI communicator (so that the layers above never call MPI themselves).
int rank_in(MPI_Comm comm);
int size_of(MPI_Comm comm);

class Topology {
 public:
  Topology(MPI_Comm world, GridShape shape);  // shape.world() must equal the size (checked earlier)
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  const GridShape& shape() const { return shape_; }
  int world_rank() const { return rank_; }
  int world_size() const { return int(shape_.world()); }
  int dp() const { return shape_.dp; }
  int pp() const { return shape_.pp; }
  int cp() const { return shape_.cp; }
  int tp() const { return shape_.tp; }
  const GridCoords& coords() const { return coords_; }
  int dp_rank() const { return coords_.dp; }
  int stage() const { return coords_.pp; }
  int cp_rank() const { return coords_.cp; }
  int tp_rank() const { return coords_.tp; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == pp() - 1; }

  static int rank_of(const GridShape& s, const GridCoords& c);
  static GridCoords coords_of(const GridShape& s, int rank);

  MPI_Comm world_comm() const { return world_; }
  MPI_Comm along(Axis a) const { return along_[size_t(a)]; }  // rank in it == the coordinate on a
  MPI_Comm dp_comm() const { return along(Axis::dp); }
  MPI_Comm pipe_comm() const { return along(Axis::pp); }   // rank in it == stage
  MPI_Comm tp_comm() const { return along(Axis::tp); }
  MPI_Comm tied_comm() const { return tied_comm_; }       // first stage is rank 0 in it
  MPI_Comm replicas_comm() const { return replicas_comm_; }  // rank in it: dp_rank * cp + cp_rank

 private:
  MPI_Comm world_;
  GridShape shape_;
  int rank_ = 0;
  GridCoords coords_;
  std::array<MPI_Comm, kAxes.size()> along_{MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  MPI_Comm tied_comm_ = MPI_COMM_NULL, replicas_comm_ = MPI_COMM_NULL;
};

}  // namespace gpt2
