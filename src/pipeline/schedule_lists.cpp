#include "pipeline/schedule_lists.hpp"

#include "pipeline/nccl_order.hpp"

namespace gpt2 {

std::vector<std::vector<Action>> make_schedules(const std::string& name, int stages, int microbatches, int chunks,
                                                const PassCosts& costs) {
  std::vector<std::vector<Action>> ranks;
  for (int r = 0; r < stages; ++r) ranks.push_back(make_schedule(name, stages, microbatches, r, chunks, costs));
  const ScheduleEntry& e = ScheduleRegistry::get(name, "parallel.schedule");
  return runnable_in_order(std::move(ranks), schedule_placement(e, stages, chunks), microbatches, costs);
}

Simulation simulate_schedule(const std::string& name, int p, int m, int v, const SimCosts& costs,
                             const PassCosts& order) {
  const ScheduleEntry& e = ScheduleRegistry::get(name, "parallel.schedule");
  const Placement pl = schedule_placement(e, p, v);
  return simulate(make_schedules(name, p, m, pl.chunks, order), m, costs, pl);
}

}  // namespace gpt2
