#pragma once
// One training step of a layout, simulated event by event with the schedule functions the trainer
// runs (make_schedule for every stage: the actions' order, the paired sends and receives), priced
// by a CostModel. The data-parallel replicas and the tensor-parallel ranks of a stage do the same
// work at the same time, so one pipeline is simulated and stands for every rank of its stage.
//
// A stage's step, as the trainer runs it (src/train/trainer.cpp):
//   zero the gradients | the schedule's actions: forwards and backwards (each unit's compute plus
//   its blocking tensor-parallel collectives; ZeRO-3's parameter gathers, prefetched one unit
//   ahead), activations and gradients to the neighbours | the gradient reductions, launched per
//   unit as its gradient completes (ZeRO 0/1: in the step's last backward; 2/3: every backward),
//   queued one after another on the data-parallel channel; the share the hardware cannot overlap
//   (1 - comm_overlap) stalls the compute that launched it | wait for them | the tied wte
//   gradient summed between the first and last stage | the gradient norm | the optimizer on the
//   shard (ZeRO 1/2: the parameters all-gathered after it) | the loss and norm all-reduced over
//   the pipeline, which ends the step of every stage together.
#include <string>
#include <vector>

#include "perf/cost_model.hpp"

namespace gpt2 {

// Bytes one rank holds (params, grads, optimizer at rest; activations at the step's peak; workspace:
// the stage's scratch buffers and ZeRO's gathered units and gradient workspaces).
struct RankMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  double total() const { return params + grads + optimizer + activations + workspace; }
};

struct StepPrediction {
  Layout layout;
  std::string problem;       // not empty: the layout cannot run this workload (and why)
  double step_s = 0, tokens_per_s = 0;
  double bubble = 0;         // idle share of the stages between the first forward and the last backward
  double exposed_comm_s = 0; // what communication adds to the step (the step with it free, subtracted)
  bool exposed_comm_known = false;
  double compute_s = 0;      // the busiest stage's forward and backward time
  double mfu = 0;            // model FLOPs (6N + 12 L C T per token) / (step x ranks x peak)
  std::vector<int> stage_layers;                   // blocks per virtual stage
  std::vector<int> peak_in_flight;                 // per pipeline rank: microbatch-chunks held at once
  std::vector<double> stage_end;                   // per pipeline rank: when its step ends
  std::vector<RankMemory> stage_memory;            // per pipeline rank (its dp and tp ranks alike)
  bool valid() const { return problem.empty(); }
  double peak_memory() const;
  // Per world rank (dp x pp x tp, tp innermost), as `gpt2 train` numbers them.
  std::vector<double> memory_per_rank() const;
};

// Empty when the layout can train the workload, else the reason (the trainer's own rules: the grid
// divides the heads and the padded vocabulary, no more stages than blocks, the batch splits over dp
// and microbatches, ZeRO's units split over dp, a registered schedule).
std::string check_layout(const Workload& w, const Layout& l);

// exposed_comm: also simulate the step with free communication (twice the work; see add_exposed_comm).
StepPrediction predict_step(const CostModel& cm, const Layout& l, bool exposed_comm = true);
void add_exposed_comm(const CostModel& cm, StepPrediction& p);

// Blocks per stage with one chunk a rank: the layout's, or the cost-balanced split.
std::vector<int> stage_layers_of(const Workload& w, const Layout& l);
// Memory per pipeline rank when rank r holds in_flight[r] microbatch-chunks' activations.
std::vector<RankMemory> predict_memory(const Workload& w, const Layout& l, const std::vector<int>& in_flight);

// Training FLOPs per token: 6N + 12 L C T (analysis/tracelib.py's flops_per_token).
double flops_per_token(const Workload& w);

}  // namespace gpt2
