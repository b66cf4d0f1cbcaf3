#pragma once
// The parallel grid and its groups. Ranks form a dp x pp x tp grid with tp innermost, then pp, then
// dp (picotron's arange(world).view(dp, pp, tp); a context-parallel axis would sit between pp and tp):
//   world rank = (dp_rank * pp + pp_rank) * tp + tp_rank
// so a tensor-parallel group is tp consecutive ranks (one node when tp divides the GPUs per node),
// and one replica's pipeline is pp * tp consecutive ranks. Each rank's coordinates are computed
// once. The groups, each an MPI communicator here (made into Communicators by CommGroups):
//   dp    ranks with the same (pp, tp): gradient averaging / sharding
//   pipe  ranks with the same (dp, tp): activations between stages (rank in it == stage)
//   tp    ranks with the same (dp, pp): tensor-parallel collectives
//   tied  the first and the last stage of one (dp, tp): the tied wte gradient; just this rank on
//         other stages, and when pp = 1
#include <mpi.h>

#include <string>

namespace gpt2 {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  long long world() const { return (long long)dp * pp * tp; }
  std::string describe() const;  // "dp 2 x pp 2 x tp 1"
};

struct GridCoords {
  int dp = 0, pp = 0, tp = 0;
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
  int tp() const { return shape_.tp; }
  const GridCoords& coords() const { return coords_; }
  int dp_rank() const { return coords_.dp; }
  int stage() const { return coords_.pp; }
  int tp_rank() const { return coords_.tp; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == pp() - 1; }

  static int rank_of(const GridShape& s, const GridCoords& c) { return (c.dp * s.pp + c.pp) * s.tp + c.tp; }
  static GridCoords coords_of(const GridShape& s, int rank) {
    return {rank / (s.pp * s.tp), rank / s.tp % s.pp, rank % s.tp};
  }

  MPI_Comm world_comm() const { return world_; }
  MPI_Comm dp_comm() const { return dp_comm_; }      // rank in it == dp_rank
  MPI_Comm pipe_comm() const { return pipe_comm_; }  // rank in it == stage
  MPI_Comm tp_comm() const { return tp_comm_; }      // rank in it == tp_rank
  MPI_Comm tied_comm() const { return tied_comm_; }  // first stage is rank 0 in it

 private:
  MPI_Comm world_;
  GridShape shape_;
  int rank_ = 0;
  GridCoords coords_;
  MPI_Comm dp_comm_ = MPI_COMM_NULL, pipe_comm_ = MPI_COMM_NULL, tp_comm_ = MPI_COMM_NULL,
           tied_comm_ = MPI_COMM_NULL;
};

}  // namespace gpt2
