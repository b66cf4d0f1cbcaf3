// zb-v (zero bubble V, Qi et al. 2023): two chunks per rank in a V -- rank r runs virtual stage r and
// stage 2p - 1 - r, so the first and the last stage (embedding and head) are both on rank 0 and the
// way back starts on the rank where the way forward ended -- with every backward split into B and W.
// The order is built by list scheduling the whole pipeline in time, each pass taking its relative
// cost (PassCosts: from the model's shape, the same on every rank): a free rank runs a ready B first
// (it unblocks the ranks upstream), else a ready F (the second chunk's first, and only while its
// virtual stage k holds fewer than 2p - k microbatches: 1F1B's bound on 2p stages, so a rank holds at
// most 2p + 1), else a pending W (oldest first). Equal costs made every pass end on the same clock
// ticks, and the ties ordered W before the gradients it waited for: with W cheaper than B, as it is,
// the bubble doubled.
#include <algorithm>
#include <deque>
#include <limits>
#include <queue>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<std::vector<Action>> list_schedule(int p, int m, const PassCosts& cost) {
  Placement pl;
  pl.kind = Placement::Kind::vee, pl.ranks = p, pl.chunks = 2;
  const int S = pl.stages();
  constexpr double never = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> fdone(S, std::vector<double>(m, never)), bdone = fdone;
  std::vector<std::vector<Action>> order(p);
  std::vector<double> free_at(p, 0);
  // Microbatches a virtual stage holds (forward done, weight pass not yet), and the next it forwards.
  std::vector<int> held(S, 0), next_f(S, 0);
  std::vector<std::deque<std::pair<int, int>>> pending_w(p);  // (mb, chunk)
  // The times at which something ends, earliest first: the clock jumps from one to the next.
  std::priority_queue<double, std::vector<double>, std::greater<double>> ends;
  // Has the message (gradient?, microbatch, to stage k) been produced by time t?
  auto arrived = [&](bool grad, int mb, int k, double t) { return (grad ? bdone[k + 1][mb] : fdone[k - 1][mb]) <= t; };
  int remaining = 3 * S * m;
  for (double t = 0; remaining > 0;) {
    for (int r = 0; r < p; ++r) {
      if (free_at[r] > t) continue;
      Action a{ActionKind::forward, -1};
      double length = 0;
      // B: the earliest microbatch whose forward here and whose gradient from the next stage are done.
      for (int mb = 0; mb < m && a.mb < 0; ++mb)
        for (int c = 1; c >= 0 && a.mb < 0; --c) {
          const int k = pl.stage(r, c);
          if (bdone[k][mb] == never && fdone[k][mb] <= t && (k == S - 1 || arrived(true, mb, k, t))) {
            a = {ActionKind::backward_input, mb, -1, c};
            length = cost.backward_input;
            bdone[k][mb] = t + length;
            pending_w[r].push_back({mb, c});
          }
        }
      // F, the way back first, within the memory limit.
      auto forward = [&]() {
        for (int c = 1; c >= 0 && a.mb < 0; --c) {
          const int k = pl.stage(r, c), mb = next_f[k];
          // 1F1B's bound for each virtual stage: stage k holds at most S - k microbatches.
          if (mb < m && held[k] < S - k && (k == 0 || arrived(false, mb, k, t))) {
            a = {ActionKind::forward, mb, -1, c};
            length = cost.forward;
            fdone[k][mb] = t + length;
            ++next_f[k], ++held[k];
          }
        }
      };
      forward();
      if (a.mb < 0 && !pending_w[r].empty()) {
        a = {ActionKind::backward_weight, pending_w[r].front().first, -1, pending_w[r].front().second};
        length = cost.backward_weight;
        --held[pl.stage(r, pending_w[r].front().second)];
        pending_w[r].pop_front();
      }
      if (a.mb < 0) continue;  // idle until something ends
      order[r].push_back(a);
      free_at[r] = t + length;
      ends.push(free_at[r]);
      --remaining;
    }
    while (!ends.empty() && ends.top() <= t) ends.pop();
    if (remaining > 0 && ends.empty()) fail("zb-v: the list schedule does not finish for p = ", p, ", m = ", m);
    if (!ends.empty()) t = ends.top();
  }
  return order;
}

std::vector<Action> zb_v(const ScheduleShape& s) {
  Placement pl;
  pl.kind = Placement::Kind::vee, pl.ranks = s.stages, pl.chunks = 2;
  return with_communication(list_schedule(s.stages, s.microbatches, s.costs), pl)[size_t(s.stage)];
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
