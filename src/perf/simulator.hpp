#pragma once
// Runs every stage's action list against each other: finds deadlocks, when each compute ran, the
// idle (bubble) fraction, and the most microbatches each stage holds activations for at once. Costs
// come from a SimulationCosts (the performance model's, perf/step_model) or are textbook clock
// cycles: unit-time forwards, backwards of a given relative cost, instant messages. Sends never
// block; a receive waits until its message has arrived (sent + transfer time).
#include <functional>
#include <string>
#include <vector>

#include "runtime/schedule.hpp"

namespace gpt2 {

struct SimulatedCompute {
  ActionKind kind;
  int mb, stage;
  double start, end;
};

struct Simulation {
  bool deadlock = false;
  std::string problem;                     // first inconsistency found (empty when none)
  std::vector<SimulatedCompute> computes;  // in completion order
  std::vector<int> peak_in_flight;         // per stage
  double makespan = 0;                     // clocks until the last stage finishes
  double bubble_fraction = 0;              // idle share of stages x makespan
  std::vector<double> finish, busy;        // per stage: clock after its last action, compute time
};

struct SimulationCosts {
  // Duration of a compute action of a stage.
  std::function<double(int stage, const Action& a)> compute;
  // Time from a send's start until the message is at the receiver (from -> to = from +- 1).
  std::function<double(int from, int to)> transfer;
  std::vector<double> start;  // per stage: clock at which it begins (empty: all at 0)
};

Simulation simulate(const std::vector<std::vector<Action>>& per_stage, int microbatches,
                    const SimulationCosts& costs);
// Textbook clock cycles: forwards take 1, backwards backward_cost, messages nothing.
Simulation simulate(const std::vector<std::vector<Action>>& per_stage, int microbatches,
                    double backward_cost = 1.0);

// Textbook forward clock cycles (torchgpipe's): at clock k, the (microbatch, stage) pairs
// (k - j, j) for the stages j that have one.
std::vector<std::vector<std::pair<int, int>>> clock_cycles(int microbatches, int stages);

}  // namespace gpt2
