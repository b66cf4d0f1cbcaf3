#pragma once
// Runs every pipeline rank's action list against the others -- with fixed costs per compute kind and
// instant messages, or with the performance model's costs per action and message transfer times
// (perf/step_model) -- and finds deadlocks and inconsistencies, when each compute ran, the idle
// (bubble) fraction, the most microbatch-chunks each rank holds activations for at once, and
// whether every pair of ranks receives its messages in the order they were sent (NCCL, which has
// no tags, needs that; MPI matches by tag). Sends never block; a receive is posted where the list
// has it and the compute that needs its message waits until it has arrived (sent + transfer time),
// as the executor does.
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/schedule.hpp"

namespace gpt2 {

// A point-to-point message of the pass lists, as the simulator and the NCCL-order model match its
// two ends: (destination rank, gradient?, microbatch, destination stage).
using PassMessage = std::tuple<int, int, int, int>;

struct SimulatedCompute {
  ActionKind kind;
  int mb, stage;  // stage: the pipeline rank
  double start;
  int chunk = 0;
  double end = 0;
};

struct SimCosts {
  double forward = 1, backward = 1;                 // a whole backward
  double backward_input = 1, backward_weight = 1;   // its two passes
  // Optional (the performance model's): the duration of each compute action of a rank, instead of
  // the fixed costs above; the time from a send until the message is at another rank (a hand-over
  // between two chunks of one rank is free); the clock at which each rank starts.
  std::function<double(int rank, const Action& a)> compute;
  std::function<double(int from, int to)> transfer;
  std::vector<double> start;
  // Timing lists already proven (the planner's thousands of layouts): the per-pair order of
  // messages is not recorded and fifo_consistent stays true.
  bool timing_only = false;
};

// The fixed costs of a schedule's passes (a whole backward = B + W).
SimCosts sim_costs(const PassCosts& c);

struct Simulation {
  bool deadlock = false;
  std::string problem;                     // first inconsistency found (empty when none)
  std::vector<SimulatedCompute> computes;  // in completion order
  std::vector<int> peak_in_flight;         // per rank: microbatch-chunks whose activations it holds
  double makespan = 0;                     // clocks until the last rank finishes
  double bubble_fraction = 0;              // idle share of ranks x makespan
  bool fifo_consistent = true;             // every pair receives in sending order
  std::vector<double> finish, busy;        // per rank: clock after its last action, compute time
};

Simulation simulate(const std::vector<std::vector<Action>>& per_rank, int microbatches, const SimCosts& costs,
                    const Placement& placement);
// One chunk per rank; backward_cost: a whole backward relative to a forward (1: textbook clock cycles).
Simulation simulate(const std::vector<std::vector<Action>>& per_rank, int microbatches, double backward_cost = 1.0);

// (A registered schedule's lists simulated: simulate_schedule, pipeline/schedule_lists.hpp.)

// Textbook forward clock cycles (torchgpipe's): at clock k, the (microbatch, stage) pairs
// (k - j, j) for the stages j that have one.
std::vector<std::vector<std::pair<int, int>>> clock_cycles(int microbatches, int stages);

}  // namespace gpt2
