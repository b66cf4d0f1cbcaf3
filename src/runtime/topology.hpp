#pragma once
// The dp x pp grid. World rank r = dp_rank * pp + stage: the stages of one replica (a pipeline) sit
// on consecutive ranks, so a pipeline stays on one node when pp divides the ranks per node.
// Communicators: `dp` joins the ranks holding the same stage (gradient averaging), `pipe` joins one
// replica's stages (activations), `tied` joins a replica's first and last stage (tied wte).
#include <mpi.h>

namespace gpt2 {

class Topology {
 public:
  Topology(MPI_Comm world, int dp, int pp);  // dp * pp must equal the world size (checked earlier)
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return dp_ * pp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int dp_rank() const { return rank_ / pp_; }
  int stage() const { return rank_ % pp_; }
  bool first_stage() const { return stage() == 0; }
  bool last_stage() const { return stage() == pp_ - 1; }
  static int rank_of(int dp_rank, int stage, int pp) { return dp_rank * pp + stage; }

  MPI_Comm dp_comm() const { return dp_comm_; }      // rank in it == dp_rank
  MPI_Comm pipe_comm() const { return pipe_comm_; }  // rank in it == stage
  MPI_Comm tied_comm() const { return tied_comm_; }  // MPI_COMM_NULL unless pp > 1 and first/last

 private:
  int rank_, dp_, pp_;
  MPI_Comm dp_comm_ = MPI_COMM_NULL, pipe_comm_ = MPI_COMM_NULL, tied_comm_ = MPI_COMM_NULL;
};

}  // namespace gpt2
