#pragma once
// Every pass list a pipeline rank executes in a run -- the training step's and evaluation's
// forward-only one -- built in one place, for every rank at once, and proven by the simulator before
// any work: no deadlock (a stuck rank's message names who waits for what), every pass after its
// input, each rank receiving each peer's messages in the order they were sent (NCCL, which has no
// tags, needs it; with a communicator per direction of each pair (pipeline/p2p) that is also all
// NCCL's in-order execution needs), and no rank holding more microbatch-chunks than the schedule's bound. The trainer
// takes its own rank's lists from here; tests and `gpt2 simulate` prove the same lists. (Samples
// run on one rank's whole copy of the model, not pipelined: no list.)
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace gpt2 {

struct PipelineShape {
  std::string schedule;  // a registered schedule (a schedule file registers itself)
  int ranks = 1, microbatches = 1, virtual_stages = 1;
  PassCosts costs;  // what zb-v orders by: the model's (RunConfig::pass_costs)
};

struct PassLists {
  Placement placement;
  std::vector<std::vector<Action>> train, eval;  // every pipeline rank's, by rank
  std::vector<int> train_peak, eval_peak;         // simulated microbatch-chunks held at once, by rank
};

// Builds and proves; InputError naming parallel.schedule (or the file) when a list cannot run.
PassLists build_pass_lists(const PipelineShape& shape);

// The proof of one set of lists: "" when they run, otherwise what goes wrong. max_in_flight: the
// most microbatch-chunks each rank may hold (by rank; empty: no bound); peak: what each holds.
std::string prove_pass_lists(const std::vector<std::vector<Action>>& lists, const Placement& placement,
                             int microbatches, const std::vector<int>& max_in_flight, std::vector<int>* peak = nullptr);

}  // namespace gpt2
