#include "perf/simulator.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

namespace gpt2 {

std::vector<std::vector<std::pair<int, int>>> clock_cycles(int m, int n) {
  std::vector<std::vector<std::pair<int, int>>> out;
  for (int k = 0; k < m + n - 1; ++k) {
    std::vector<std::pair<int, int>> c;
    for (int j = std::max(1 + k - m, 0); j < std::min(1 + k, n); ++j) c.push_back({k - j, j});
    out.push_back(c);
  }
  return out;
}

Simulation simulate(const std::vector<std::vector<Action>>& stages, int m, double bcost) {
  SimulationCosts c;
  c.compute = [bcost](int, const Action& a) { return a.kind == ActionKind::forward ? 1.0 : bcost; };
  c.transfer = [](int, int) { return 0.0; };
  return simulate(stages, m, c);
}

Simulation simulate(const std::vector<std::vector<Action>>& stages, int m, const SimulationCosts& costs) {
  const int p = int(stages.size());
  Simulation sim;
  sim.peak_in_flight.assign(p, 0);
  std::vector<size_t> pc(p, 0);
  std::vector<double> clock(p, 0), busy(p, 0);
  if (!costs.start.empty()) clock = costs.start;
  std::vector<int> in_flight(p, 0);
  std::vector<bool> sent(p, false);  // the current paired action's send is out
  std::vector<std::vector<bool>> fwd_done(p, std::vector<bool>(m)), bwd_done(p, std::vector<bool>(m));
  std::vector<std::vector<bool>> has_input(p, std::vector<bool>(m)), has_grad(p, std::vector<bool>(m));
  // message (to stage, kind 0 = activation / 1 = gradient, mb) -> arrival time
  std::map<std::tuple<int, int, int>, double> mailbox;
  auto complain = [&](int s, const std::string& what) {
    if (sim.problem.empty()) {
      std::ostringstream os;
      os << "stage " << s << ": " << what;
      sim.problem = os.str();
    }
  };
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      while (pc[s] < stages[s].size()) {
        const Action a = stages[s][pc[s]];
        if (a.mb < 0 || a.mb >= m) {
          complain(s, "microbatch out of range");
          pc[s] = stages[s].size();
          break;
        }
        // A paired action is its send (done once, on the first visit) and then its receive.
        const bool paired = a.kind == ActionKind::send_activation_recv_grad ||
                            a.kind == ActionKind::send_grad_recv_activation;
        const bool sends = paired || a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad;
        const bool receives = paired || a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad;
        if (sends && !sent[s]) {
          const bool activation = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_activation_recv_grad;
          const int to = activation ? s + 1 : s - 1;
          if (to < 0 || to >= p) complain(s, "sends past the end of the pipeline");
          else if (activation && !fwd_done[s][a.mb]) complain(s, "sends an activation before computing it");
          else if (!activation && !bwd_done[s][a.mb]) complain(s, "sends a gradient before computing it");
          mailbox[{to, activation ? 0 : 1, a.mb}] = clock[s] + (to >= 0 && to < p ? costs.transfer(s, to) : 0.0);
          sent[s] = true;
          progressed = true;
        }
        if (receives) {
          const int kind = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
          const int mb = paired ? a.recv_mb : a.mb;
          if (mb < 0 || mb >= m) {
            complain(s, "receives a microbatch out of range");
            pc[s] = stages[s].size();
            break;
          }
          auto it = mailbox.find({s, kind, mb});
          if (it == mailbox.end()) break;  // blocked
          clock[s] = std::max(clock[s], it->second);
          mailbox.erase(it);
          (kind ? has_grad : has_input)[s][mb] = true;
        }
        if (sends || receives) {
          sent[s] = false;
        } else if (a.kind == ActionKind::forward) {
          if (s > 0 && !has_input[s][a.mb]) complain(s, "forward without its input");
          const double d = costs.compute(s, a);
          sim.computes.push_back({a.kind, a.mb, s, clock[s], clock[s] + d});
          clock[s] += d, busy[s] += d;
          fwd_done[s][a.mb] = true;
          sim.peak_in_flight[s] = std::max(sim.peak_in_flight[s], ++in_flight[s]);
        } else {
          if (!fwd_done[s][a.mb]) complain(s, "backward before its forward");
          if (s < p - 1 && !has_grad[s][a.mb]) complain(s, "backward without its output gradient");
          const double d = costs.compute(s, a);
          sim.computes.push_back({a.kind, a.mb, s, clock[s], clock[s] + d});
          clock[s] += d, busy[s] += d;
          bwd_done[s][a.mb] = true;
          --in_flight[s];
        }
        ++pc[s];
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    if (pc[s] < stages[s].size()) sim.deadlock = true;
  if (sim.deadlock) complain(0, "deadlock: some stage waits for a message that never comes");
  for (int s = 0; s < p; ++s) {
    for (int i = 0; i < m; ++i) {
      const bool needs_bwd = std::any_of(stages[s].begin(), stages[s].end(), [](const Action& a) {
        return a.kind == ActionKind::backward;
      });
      if (!fwd_done[s][i] || (needs_bwd && !bwd_done[s][i])) complain(s, "does not run every microbatch");
    }
  }
  if (!mailbox.empty()) complain(0, "a message was sent but never received");
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  double total_busy = 0;
  for (double b : busy) total_busy += b;
  sim.bubble_fraction = sim.makespan > 0 ? 1.0 - total_busy / (p * sim.makespan) : 0;
  sim.finish = clock;
  sim.busy = busy;
  return sim;
}

}  // namespace gpt2
