#pragma once
// A registered schedule's lists for every rank at once, as the trainer runs them: each rank's
// make_schedule, with the messages placed in lockstep where they would hang under NCCL's ordering
// as they are (pipeline/nccl_order); and those lists simulated. Above schedule, nccl_order and
// simulator, which it composes (none of them calls back up).
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"
#include "pipeline/simulator.hpp"

namespace gpt2 {

std::vector<std::vector<Action>> make_schedules(const std::string& name, int stages, int microbatches, int chunks = 1,
                                                const PassCosts& costs = {});

// Every rank's list of schedule `name` for p ranks, m microbatches and the chunks it runs with
// parallel.virtual_stages = v, simulated with `costs`. order: the pass costs the schedule orders by
// (zb-v), as the trainer gives them.
Simulation simulate_schedule(const std::string& name, int p, int m, int v = 1, const SimCosts& costs = {},
                             const PassCosts& order = {});

}  // namespace gpt2
