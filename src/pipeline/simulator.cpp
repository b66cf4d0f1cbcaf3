#include "pipeline/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <unordered_map>

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

namespace {
// What a rank has done for (virtual stage, microbatch).
struct Progress {
  std::vector<std::vector<char>> fwd, bwd, wgt, input, grad;  // [stage][mb]
  Progress(int stages, int m)
      : fwd(stages, std::vector<char>(m)), bwd(stages, std::vector<char>(m)), wgt(stages, std::vector<char>(m)),
        input(stages, std::vector<char>(m)), grad(stages, std::vector<char>(m)) {}
};
// One simulation: every rank's place in its list, its clock, and the messages in flight.
class Simulator {
 public:
  Simulator(const std::vector<std::vector<Action>>& ranks, int m, const SimCosts& costs, const Placement& pl)
      : ranks_(ranks), costs_(costs), pl_(pl), p_(int(ranks.size())), S_(pl.stages()), m_(m), at_(p_), done_(S_, m),
        mailbox_(size_t(S_) * 2 * size_t(m), std::numeric_limits<double>::quiet_NaN()) {
    sim_.peak_in_flight.assign(p_, 0);
    if (costs.start.size() == size_t(p_)) at_.clock = costs.start;
    // A rank whose list has no backward evaluates: a microbatch-chunk is let go once its output is
    // sent (at the last virtual stage, once computed), as the executor does.
    for (int r = 0; r < p_; ++r)
      at_.trains[r] = std::any_of(ranks[r].begin(), ranks[r].end(), [](const Action& a) {
        return a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
      });
  }
  int ranks() const { return p_; }
  bool advance(int r);
  Simulation finish();

 private:
  // The message in flight to (stage, gradient?, microbatch): when it arrives (NaN: none).
  double& slot(int stage, int grad, int mb) {
    return mailbox_[(size_t(stage) * 2 + size_t(grad)) * size_t(m_) + size_t(mb)];
  }
  int64_t pair_key(int from, int to) const { return int64_t(from) * p_ + to; }
  void complain(int s, const std::string& what) {
    if (sim_.problem.empty()) {
      std::ostringstream os;
      os << "rank " << s << ": " << what;
      sim_.problem = os.str();
    }
  }
  bool valid(int mb, int chunk) const { return mb >= 0 && mb < m_ && chunk >= 0 && chunk < pl_.chunks; }
  void send(int r, const Action& a, int k);
  bool receive(int r, const Action& a, bool paired);
  bool compute(int r, const Action& a, int k);
  double record_pass(int r, const Action& a, int k);
  void name_stuck_ranks();

  const std::vector<std::vector<Action>>& ranks_;
  const SimCosts& costs_;
  const Placement& pl_;
  const int p_, S_, m_;
  Simulation sim_;
  struct Ranks {  // each rank's place in its list, clock, time busy and microbatch-chunks held
    std::vector<size_t> pc;
    std::vector<double> clock, busy;
    std::vector<int> in_flight;
    std::vector<bool> sent;    // the current paired action's send is out
    std::vector<bool> trains;  // its list has backwards (else it evaluates)
    explicit Ranks(int p) : pc(size_t(p), 0), clock(size_t(p), 0), busy(size_t(p), 0), in_flight(size_t(p), 0),
                            sent(size_t(p), false), trains(size_t(p), false) {}
  } at_;
  Progress done_;
  // The messages in flight by (destination stage, gradient?, microbatch). Flat: the planner
  // simulates thousands of layouts.
  std::vector<double> mailbox_;
  size_t in_mailbox_ = 0;
  // Per (from, to) rank pair, in program order: every pair must receive in sending order.
  std::unordered_map<int64_t, std::vector<PassMessage>> sends_, receives_;
};

// Runs rank r's list as far as it can go (a compute waits for its message); true when it moved.
bool Simulator::advance(int r) {
  bool progressed = false;
  while (at_.pc[r] < ranks_[r].size()) {
    const Action a = ranks_[r][at_.pc[r]];
    if (!valid(a.mb, a.chunk)) {
      complain(r, "microbatch or chunk out of range");
      at_.pc[r] = ranks_[r].size();
      break;
    }
    const int k = pl_.stage(r, a.chunk);
    // A paired action is its send (done once, on the first visit) and then its receive.
    const bool paired = a.kind == ActionKind::send_activation_recv_grad || a.kind == ActionKind::send_grad_recv_activation;
    const bool sends_now = paired || a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad;
    const bool receives_now = paired || a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad;
    if (sends_now && !at_.sent[r]) {
      send(r, a, k);
      progressed = true;
    }
    if (receives_now && !receive(r, a, paired)) break;
    if (sends_now || receives_now) at_.sent[r] = false;
    else if (!compute(r, a, k)) break;  // blocked
    ++at_.pc[r];
    progressed = true;
  }
  return progressed;
}

// Rank r sends the output of virtual stage k (an activation onward, a gradient back).
void Simulator::send(int r, const Action& a, int k) {
  const bool activation = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_activation_recv_grad;
  const int to_stage = activation ? k + 1 : k - 1;
  if (to_stage < 0 || to_stage >= S_) complain(r, "sends past the end of the pipeline");
  else if (activation && !done_.fwd[k][a.mb]) complain(r, "sends an activation before computing it");
  else if (!activation && !done_.bwd[k][a.mb]) complain(r, "sends a gradient before computing it");
  const PassMessage msg{pl_.rank_of(std::clamp(to_stage, 0, S_ - 1)), activation ? 0 : 1, a.mb, to_stage};
  const int to = std::get<0>(msg);
  double& arrives = slot(std::clamp(to_stage, 0, S_ - 1), activation ? 0 : 1, a.mb);
  if (std::isnan(arrives)) ++in_mailbox_;
  arrives = at_.clock[r] + (costs_.transfer && to != r ? costs_.transfer(r, to) : 0.0);
  if (to != r && !costs_.timing_only) sends_[pair_key(r, to)].push_back(msg);
  if (activation && !at_.trains[r]) --at_.in_flight[r];
  at_.sent[r] = true;
}

// Rank r posts a receive (the compute that needs it waits for it); false when it names no
// microbatch or chunk of the run.
bool Simulator::receive(int r, const Action& a, bool paired) {
  const bool grad = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
  const int mb = paired ? a.recv_mb : a.mb, chunk = paired ? a.recv_chunk : a.chunk;
  if (!valid(mb, chunk)) {
    complain(r, "receives a microbatch or chunk out of range");
    at_.pc[r] = ranks_[r].size();
    return false;
  }
  const int at = pl_.stage(r, chunk);
  const PassMessage msg{r, grad ? 1 : 0, mb, at};
  const int from = pl_.rank_of(grad ? at + 1 : at - 1);
  if (from != r && !costs_.timing_only) receives_[pair_key(from, r)].push_back(msg);
  (grad ? done_.grad : done_.input)[at][mb] = true;
  return true;
}

// Rank r runs a compute of virtual stage k once the message it needs (posted by an earlier
// receive) has arrived; false while it has not.
bool Simulator::compute(int r, const Action& a, int k) {
  const bool needs_input = a.kind == ActionKind::forward && k > 0;
  const bool needs_grad = (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) && k < S_ - 1;
  if ((needs_input && done_.input[k][a.mb]) || (needs_grad && done_.grad[k][a.mb])) {
    double& arrives = slot(k, needs_grad ? 1 : 0, a.mb);
    if (std::isnan(arrives)) return false;
    at_.clock[r] = std::max(at_.clock[r], arrives);
    arrives = std::numeric_limits<double>::quiet_NaN();
    --in_mailbox_;
  }
  double cost = record_pass(r, a, k);
  if (costs_.compute) cost = costs_.compute(r, a);
  sim_.computes.push_back({a.kind, a.mb, r, at_.clock[r], a.chunk, at_.clock[r] + cost});
  at_.clock[r] += cost, at_.busy[r] += cost;
  return true;
}

// Marks the pass done (checking what it needs was done) and counts the microbatch-chunks rank r
// holds; returns the pass's fixed cost.
double Simulator::record_pass(int r, const Action& a, int k) {
  if (a.kind == ActionKind::forward) {
    if (k > 0 && !done_.input[k][a.mb]) complain(r, "forward without its input");
    done_.fwd[k][a.mb] = true;
    sim_.peak_in_flight[r] = std::max(sim_.peak_in_flight[r], ++at_.in_flight[r]);
    if (!at_.trains[r] && k == S_ - 1) --at_.in_flight[r];
    return costs_.forward;
  }
  if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) {
    if (!done_.fwd[k][a.mb]) complain(r, "backward before its forward");
    if (k < S_ - 1 && !done_.grad[k][a.mb]) complain(r, "backward without its output gradient");
    done_.bwd[k][a.mb] = true;
    if (a.kind == ActionKind::backward_input) return costs_.backward_input;
    done_.wgt[k][a.mb] = true;
    --at_.in_flight[r];
    return costs_.backward;
  }
  // weight pass
  if (!done_.bwd[k][a.mb]) complain(r, "weight pass before its input pass");
  done_.wgt[k][a.mb] = true;
  --at_.in_flight[r];
  return costs_.backward_weight;
}

// Only a compute waiting for its message blocks: name what each stuck rank waits for.
void Simulator::name_stuck_ranks() {
  std::ostringstream stuck;
  for (int r = 0; r < p_; ++r) {
    if (at_.pc[r] >= ranks_[r].size()) continue;
    const Action& a = ranks_[r][at_.pc[r]];
    const bool grad = a.kind != ActionKind::forward;
    const int k = pl_.stage(r, a.chunk);
    stuck << (sim_.deadlock ? "; " : "") << "rank " << r << " waits for the " << (grad ? "gradient" : "activation")
          << " of microbatch " << a.mb << " from virtual stage " << (grad ? k + 1 : k - 1);
    sim_.deadlock = true;
  }
  if (sim_.deadlock && sim_.problem.empty()) sim_.problem = "deadlock: " + stuck.str() + " (no rank can send it)";
}

// Once no rank moves: what went wrong, and the clocks.
Simulation Simulator::finish() {
  name_stuck_ranks();
  for (int k = 0; k < S_; ++k) {
    const int r = pl_.rank_of(k);
    for (int i = 0; i < m_; ++i)
      if (!done_.fwd[k][i] || (at_.trains[r] && (!done_.bwd[k][i] || !done_.wgt[k][i])))
        complain(r, "does not run every microbatch through stage " + std::to_string(k));
  }
  if (in_mailbox_ > 0) complain(0, "a message was sent but never received");
  for (const auto& [pair, s] : sends_) sim_.fifo_consistent = sim_.fifo_consistent && receives_[pair] == s;
  sim_.makespan = *std::max_element(at_.clock.begin(), at_.clock.end());
  double total_busy = 0;
  for (double b : at_.busy) total_busy += b;
  sim_.bubble_fraction = sim_.makespan > 0 ? 1.0 - total_busy / (p_ * sim_.makespan) : 0;
  sim_.finish = at_.clock;
  sim_.busy = at_.busy;
  return std::move(sim_);
}
}  // namespace

Simulation simulate(const std::vector<std::vector<Action>>& ranks, int m, const SimCosts& costs, const Placement& pl) {
  Simulator s(ranks, m, costs, pl);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < s.ranks(); ++r)
      if (s.advance(r)) progressed = true;
  }
  return s.finish();
}

SimCosts sim_costs(const PassCosts& c) {
  SimCosts s;
  s.forward = c.forward, s.backward_input = c.backward_input, s.backward_weight = c.backward_weight;
  s.backward = c.backward_input + c.backward_weight;
  return s;
}

Simulation simulate(const std::vector<std::vector<Action>>& per_rank, int m, double backward_cost) {
  SimCosts c;
  c.backward = backward_cost;
  Placement pl;
  pl.ranks = int(per_rank.size());
  return simulate(per_rank, m, c, pl);
}

}  // namespace gpt2
