#pragma once
// Which layout to run a model on N devices: every valid (dp, tp, pp, ZeRO level, schedule,
// microbatches, precision, sequence parallelism, context parallelism, activation recomputation) with
// dp x tp x pp x cp = N is
// predicted (step_model),
// those that do not fit the device's memory are dropped, the rest ranked by tokens/s.
#include <vector>

#include "perf/step_model.hpp"

namespace gpt2 {

struct PlanOptions {
  long long devices = 8;
  int max_microbatches = 64;      // per dp rank
  double usable_memory = 0.9;     // share of device memory a run may fill (allocator, context, buffers)
  std::vector<Precision> precisions;  // empty: every precision the hardware has
  size_t detailed = 50;           // the fastest layouts whose exposed communication is computed
  std::vector<Recompute> recompute = {Recompute::none, Recompute::selective, Recompute::full};  // modes to consider
  int max_cp = 8;                 // context-parallel ranks per sequence to consider (those dividing T / 2)
  bool predict_too_big = false;   // also predict the layouts that do not fit (Plan::too_big_layouts)
};

struct Plan {
  std::vector<StepPrediction> ranked;  // fitting layouts, fastest first
  size_t considered = 0, invalid = 0, too_big = 0;
  StepPrediction smallest_too_big;     // of the dropped ones, the one needing the least memory
  std::vector<StepPrediction> too_big_layouts;  // with predict_too_big: the dropped ones, predicted
};

// The layouts considered (all pass check_layout).
std::vector<Layout> enumerate_layouts(const Workload& w, const Hardware& hw, const PlanOptions& o);
// Layouts whose memory at rest plus one microbatch's activations exceed the budget are dropped
// before they are simulated.
Plan plan_layouts(const CostModel& cm, const PlanOptions& o);

}  // namespace gpt2
