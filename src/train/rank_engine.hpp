#pragma once
// What one rank runs, built from the deck: its place in the dp x pp x cp x tp grid and its
// communicators, its chunks of the model over the parameter store, and the pipeline executor with
// this rank's pass lists (proven with every other rank's).
#include <memory>
#include <vector>

#include "model/param_layout.hpp"
#include "model/stage.hpp"
#include "parallel/cp_comm.hpp"
#include "parallel/param_store.hpp"
#include "parallel/tp_comm.hpp"
#include "pipeline/executor.hpp"
#include "runtime/comm_groups.hpp"
#include "runtime/environment.hpp"
#include "runtime/topology.hpp"
#include "train/run_config.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

// Which blocks each rank runs: the virtual stages' blocks, their placement on the ranks, each unit
// padded to a multiple of the replicas (ZeRO); any rank's part of the model from them.
struct StagePlan {
  std::unique_ptr<ParamLayout> model;
  Placement placement;
  std::vector<int> stage_layers;  // blocks of each virtual stage
  size_t shard_ranks = 1;  // ZeRO's (the layout pads its segments for them)
  int tp = 1;
  StageLayout layout_of(const GridCoords& c) const;  // the local layout of the rank at c
  // The embedding and the head (which share wte) on different ranks.
  bool tied_apart() const { return placement.rank_of(0) != placement.rank_of(placement.stages() - 1); }
};

// What the parts that move the model's values between ranks, files and the sampler see of the
// rank (ModelGather, Checkpointer, LossSums, Reporter): its place and communicators, its parameter
// store, the plan and its chunks of the model.
struct RankValues {
  const Topology& topo;
  CommGroups& groups;
  ParamStore& store;
  const StagePlan& plan;
  const std::vector<std::unique_ptr<Stage<float>>>& chunks;
  const StageLayout& local() const { return chunks.front()->layout(); }  // the rank's part
  bool root() const { return groups.world->rank() == 0; }
};

// What runs the evaluation passes and counts the passes' memory (Evaluator, Reporter).
struct RankPasses {
  PipelineExecutor& exec;
  const std::vector<Action>& eval;
  int microbatch_size;
  const std::vector<std::unique_ptr<Stage<float>>>& chunks;
  // The most microbatches' saved activations held at once, plus what recomputed blocks share.
  size_t activation_bytes() const;
};

class RankEngine {
 public:
  // Collective, as each of the two parts: the grid and its communicators, then (build_model) the
  // model. The stages' probes record into tracer, naming the step `step` holds when they run.
  RankEngine(const RunConfig& cfg, Environment& env, MPI_Comm comm);
  void build_model(const RunConfig& cfg, Environment& env, Tracer& tracer, const int64_t& step);
  // A training step's passes (io: its microbatches), then its gradients finished: reduced over the
  // replicas, sequence parallelism's tp sums, the tied embedding's copies added up.
  void run_step(int step, int microbatches, const PipelineExecutor::StepIO& io);

  const Topology& topo() const { return *topo_; }
  CommGroups& groups() { return *groups_; }
  ParamStore& store() { return *store_; }
  int microbatch_size() const { return mb_size_; }
  RankValues values() { return {*topo_, *groups_, *store_, plan_, stages_}; }
  RankPasses passes() { return {*exec_, eval_actions_, mb_size_, stages_}; }

 private:
  StageOptions<float> stage_options(const RunConfig& cfg, Tracer& tracer, const int64_t& step);

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<CommGroups> groups_;
  StagePlan plan_;
  int mb_size_ = 1;  // sequences per microbatch on this rank
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<CommTpGroup> tp_group_;
  std::unique_ptr<CommCpRing> cp_ring_;
  std::vector<std::unique_ptr<Stage<float>>> stages_;  // one per chunk this rank runs
  std::unique_ptr<PipelineExecutor> exec_;
  std::vector<Action> train_actions_, eval_actions_;
};

}  // namespace gpt2
