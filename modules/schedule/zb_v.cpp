// zb-v (zero bubble V, Qi et al. 2023): two chunks per rank in a V -- rank r runs virtual stage r and
// stage 2p - 1 - r, so the first and the last stage (embedding and head) are both on rank 0 and the
// way back starts on the rank where the way forward ended -- with every backward split into B and W.
// The order is pipeline/list_schedule's with 1F1B's bound on 2p stages (virtual stage k holds fewer
// than 2p - k microbatches, so a rank holds at most 2p + 1).
#include <algorithm>

#include "pipeline/list_schedule.hpp"
#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> zb_v(const ScheduleShape& s) {
  Placement pl;
  pl.kind = Placement::Kind::vee, pl.ranks = s.stages, pl.chunks = 2;
  // 1F1B's bound for each virtual stage on 2p stages: stage k holds at most 2p - k microbatches.
  const int S = pl.stages();
  return with_communication(list_schedule(pl, s.microbatches, s.costs, [S](int k) { return S - k; }, "zb-v"),
                            pl)[size_t(s.stage)];
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"zb-v",
                  "zero bubble V: two chunks per rank in a V, backward split, list-scheduled; bubble near zero for m >= 2p",
                  5, zb_v, Placement::Kind::vee, /*chunks=*/2, /*split_backward=*/true};
  e.max_in_flight = [](const ScheduleShape& s) { return std::min(2 * s.stages + 1, 2 * s.microbatches); };
  return e;
}());
}  // namespace

}  // namespace gpt2
