#pragma once
// Runs every stage's action list against each other with unit-time forwards and backwards and
// instant messages: finds deadlocks, the clock at which each compute ran, the idle (bubble)
// fraction, and the most microbatches each stage holds activations for at once.
#include <string>
#include <vector>

#include "runtime/schedule.hpp"

namespace gpt2 {

struct SimulatedCompute {
  ActionKind kind;
  int mb, stage;
  double start;
};

struct Simulation {
  bool deadlock = false;
  std::string problem;                     // first inconsistency found (empty when none)
  std::vector<SimulatedCompute> computes;  // in completion order
  std::vector<int> peak_in_flight;         // per stage
  double makespan = 0;                     // clocks until the last stage finishes
  double bubble_fraction = 0;              // idle share of stages x makespan
};

// backward_cost: duration of a backward relative to a forward (1 for textbook clock cycles).
Simulation simulate(const std::vector<std::vector<Action>>& per_stage, int microbatches,
                    double backward_cost = 1.0);

// Textbook forward clock cycles (torchgpipe's): at clock k, the (microbatch, stage) pairs
// (k - j, j) for the stages j that have one.
std::vector<std::vector<std::pair<int, int>>> clock_cycles(int microbatches, int stages);

}  // namespace gpt2
