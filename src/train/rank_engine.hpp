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

struct RankEngine {
  // Collective, as each of the two parts: the grid and its communicators, then (build_model) the
  // model. The stages' probes record into tracer, naming the step `step` holds when they run.
  RankEngine(const RunConfig& cfg, Environment& env, MPI_Comm comm);
  void build_model(const RunConfig& cfg, Environment& env, Tracer& tracer, const int64_t& step);
  StageLayout layout_of(const GridCoords& c) const;  // the local layout of the rank at c
  Stage<float>& stage() { return *stages.front(); }  // the first chunk's
  const StageLayout& stage_layout() const { return stages.front()->layout(); }  // the rank's
  // The most microbatches' saved activations held at once, plus what recomputed blocks share.
  size_t activation_bytes() const;

  std::unique_ptr<Topology> topo;
  std::unique_ptr<CommGroups> groups;
  std::unique_ptr<ParamLayout> layout;
  Placement placement;
  std::vector<int> stage_layers;  // blocks of each virtual stage
  size_t unit_multiple = 1;       // ZeRO: each unit padded to a multiple of the replicas (StageLayout)
  int mb_size = 1;                // sequences per microbatch on this rank
  int blas_threads = 1;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<CommTpGroup> tp_group;
  std::unique_ptr<CommCpRing> cp_ring;
  std::vector<std::unique_ptr<Stage<float>>> stages;  // one per chunk this rank runs
  std::unique_ptr<PipelineExecutor> exec;
  std::vector<Action> train_actions, eval_actions;

 private:
  StageOptions<float> stage_options(const RunConfig& cfg, Tracer& tracer, const int64_t& step);
};

}  // namespace gpt2
