#include "pipeline/list_schedule.hpp"

#include <deque>
#include <limits>
#include <queue>

#include "core/error.hpp"

namespace gpt2 {

std::vector<std::vector<Action>> list_schedule(const Placement& pl, int m, const PassCosts& cost,
                                               const std::function<int(int)>& bound, const char* who) {
  const int p = pl.ranks, S = pl.stages(), v = pl.chunks;
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
      // B: the earliest microbatch whose forward here and whose gradient from the next stage are
      // done, the rank's last chunk first (nearest the head).
      for (int mb = 0; mb < m && a.mb < 0; ++mb)
        for (int c = v - 1; c >= 0 && a.mb < 0; --c) {
          const int k = pl.stage(r, c);
          if (bdone[k][mb] == never && fdone[k][mb] <= t && (k == S - 1 || arrived(true, mb, k, t))) {
            a = {ActionKind::backward_input, mb, -1, c};
            length = cost.backward_input;
            bdone[k][mb] = t + length;
            pending_w[r].push_back({mb, c});
          }
        }
      // F, the last chunk first, within the memory bound.
      for (int c = v - 1; c >= 0 && a.mb < 0; --c) {
        const int k = pl.stage(r, c), mb = next_f[k];
        if (mb < m && held[k] < bound(k) && (k == 0 || arrived(false, mb, k, t))) {
          a = {ActionKind::forward, mb, -1, c};
          length = cost.forward;
          fdone[k][mb] = t + length;
          ++next_f[k], ++held[k];
        }
      }
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
    if (remaining > 0 && ends.empty()) fail_input("parallel.schedule", who, ": the list schedule does not finish for ",
                                                  "parallel.pp = ", p, ", parallel.microbatches = ", m);
    if (!ends.empty()) t = ends.top();
  }
  return order;
}

}  // namespace gpt2
