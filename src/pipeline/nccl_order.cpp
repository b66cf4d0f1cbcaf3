#include "pipeline/nccl_order.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "pipeline/simulator.hpp"

namespace gpt2 {

namespace {

// One message of a group, as in_order_problem follows it.
struct QueuedMessage {
  bool send;
  int peer;  // the other rank
  PassMessage msg;
  bool done = false;
};
using QueuedGroup = std::vector<QueuedMessage>;

// The messages of action a of rank r that cross to another rank (a hand-over to the rank's own
// other chunk moves nothing).
void messages_of(const Action& a, int r, const Placement& pl, QueuedGroup& out) {
  const int S = pl.stages();
  const bool paired = a.kind == ActionKind::send_activation_recv_grad || a.kind == ActionKind::send_grad_recv_activation;
  if (paired || a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad) {
    const bool activation = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_activation_recv_grad;
    const int k = pl.stage(r, a.chunk), to_stage = std::clamp(activation ? k + 1 : k - 1, 0, S - 1);
    const int to = pl.rank_of(to_stage);
    if (to != r) out.push_back({true, to, PassMessage{to, activation ? 0 : 1, a.mb, to_stage}});
  }
  if (paired || a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad) {
    const bool grad = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
    const int chunk = paired ? a.recv_chunk : a.chunk, mb = paired ? a.recv_mb : a.mb;
    const int at = pl.stage(r, chunk), from = pl.rank_of(std::clamp(grad ? at + 1 : at - 1, 0, S - 1));
    if (from != r) out.push_back({false, from, PassMessage{r, grad ? 1 : 0, mb, at}});
  }
}

std::string describe_message(const QueuedMessage& m) {
  std::ostringstream os;
  os << (m.send ? "the send of " : "the receive of ") << (std::get<1>(m.msg) ? "the gradient" : "the activation")
     << " of microbatch " << std::get<2>(m.msg) << " for virtual stage " << std::get<3>(m.msg)
     << (m.send ? " to rank " : " from rank ") << m.peer;
  return os.str();
}
}  // namespace

std::string in_order_problem(const std::vector<std::vector<Action>>& ranks, const Placement& pl) {
  const int p = int(ranks.size()), S = pl.stages();
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<std::deque<QueuedGroup>> queue(static_cast<size_t>(p));
  std::vector<std::set<PassMessage>> arrived(static_cast<size_t>(p));  // receives completed, by receiving rank
  // Is (the group of) message m at the head of its peer's queue, not yet moved? Then both move.
  auto match = [&](int r, QueuedMessage& m) {
    if (queue[size_t(m.peer)].empty()) return false;
    for (QueuedMessage& o : queue[size_t(m.peer)].front())
      if (!o.done && o.send != m.send && o.peer == r && o.msg == m.msg) return o.done = m.done = true;
    return false;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      // Issue what can be issued: groups at once, a compute once its message has arrived.
      while (pc[size_t(r)] < ranks[size_t(r)].size()) {
        const Action& a = ranks[size_t(r)][pc[size_t(r)]];
        if (!is_compute(a.kind)) {
          QueuedGroup g;
          for (; pc[size_t(r)] < ranks[size_t(r)].size() && !is_compute(ranks[size_t(r)][pc[size_t(r)]].kind); ++pc[size_t(r)])
            messages_of(ranks[size_t(r)][pc[size_t(r)]], r, pl, g);
          if (!g.empty()) queue[size_t(r)].push_back(std::move(g));
          moved = true;
          continue;
        }
        const int k = pl.stage(r, a.chunk);
        const bool needs_input = a.kind == ActionKind::forward && k > 0 && pl.rank_of(k - 1) != r;
        const bool needs_grad = (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) && k < S - 1 &&
                                pl.rank_of(k + 1) != r;
        const PassMessage needed{r, needs_grad ? 1 : 0, a.mb, k};
        if ((needs_input || needs_grad) && !arrived[size_t(r)].count(needed)) break;
        ++pc[size_t(r)];
        moved = true;
      }
      // The head group's messages move where the peer's head group holds their other end.
      if (queue[size_t(r)].empty()) continue;
      QueuedGroup& head = queue[size_t(r)].front();
      for (QueuedMessage& m : head)
        if (!m.done && match(r, m)) {
          arrived[size_t(m.send ? m.peer : r)].insert(m.msg);
          moved = true;
        }
      // Completed heads go (a peer's pops on its own turn).
      auto complete = [](const QueuedGroup& g) {
        return std::all_of(g.begin(), g.end(), [](const QueuedMessage& m) { return m.done; });
      };
      while (!queue[size_t(r)].empty() && complete(queue[size_t(r)].front())) {
        queue[size_t(r)].pop_front();
        moved = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < p; ++r) {
    if (queue[size_t(r)].empty() && pc[size_t(r)] >= ranks[size_t(r)].size()) continue;
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r;
    if (!queue[size_t(r)].empty()) {
      for (const QueuedMessage& m : queue[size_t(r)].front())
        if (!m.done) {
          stuck << " waits with " << describe_message(m) << " at the head of its queue";
          break;
        }
    } else {
      const Action& a = ranks[size_t(r)][pc[size_t(r)]];
      stuck << " waits to " << action_name(a.kind) << " microbatch " << a.mb << " of virtual stage " << pl.stage(r, a.chunk);
    }
  }
  if (stuck.tellp() == 0) return "";
  return "deadlock under NCCL's ordering (each rank's messages between two passes go as one group, groups one at a "
         "time in issue order): " + stuck.str();
}

std::vector<std::vector<Action>> place_messages_in_lockstep(const std::vector<std::vector<Action>>& lists,
                                                            const Placement& pl, int m, const PassCosts& costs) {
  const Simulation sim = simulate(lists, m, sim_costs(costs), pl);
  if (!sim.problem.empty()) return lists;  // (the proof says what is wrong with them)
  const int p = int(lists.size()), S = pl.stages();
  std::map<std::tuple<int, ActionKind, int, int>, std::pair<double, double>> when;  // (rank, kind, mb, chunk)
  for (const SimulatedCompute& c : sim.computes) when[{c.stage, c.kind, c.mb, c.chunk}] = {c.start, c.end};
  // A message's slot (the clock when it was made) and its two ends' actions.
  struct Placed {
    double at;
    int from, to;
    PassMessage msg;  // the tie-break
    Action send, recv;
  };
  std::vector<Placed> messages;
  for (int r = 0; r < p; ++r)
    for (const Action& a : lists[size_t(r)]) {
      if (!is_compute(a.kind) || a.kind == ActionKind::backward_weight) continue;
      const int k = pl.stage(r, a.chunk);
      const bool forward = a.kind == ActionKind::forward;
      const int to_stage = forward ? k + 1 : k - 1;
      if (to_stage < 0 || to_stage >= S) continue;
      const int to = pl.rank_of(to_stage), to_chunk = pl.chunk_of(to_stage);
      const Action send{forward ? ActionKind::send_activation : ActionKind::send_grad, a.mb, -1, a.chunk};
      const Action recv{forward ? ActionKind::recv_activation : ActionKind::recv_grad, a.mb, -1, to_chunk};
      const PassMessage msg{to, forward ? 0 : 1, a.mb, to_stage};
      messages.push_back({when[{r, a.kind, a.mb, a.chunk}].second, r, to, msg, send, recv});
    }
  std::sort(messages.begin(), messages.end(), [](const Placed& x, const Placed& y) {
    return std::tie(x.at, x.from, x.msg) < std::tie(y.at, y.from, y.msg);
  });
  std::vector<std::vector<Action>> out(lists.size());
  for (int r = 0; r < p; ++r) {
    std::vector<Action> list;
    size_t next = 0;  // messages in slot order: those this rank sends or receives
    auto messages_until = [&](double t) {
      for (; next < messages.size() && messages[next].at <= t; ++next) {
        const Placed& x = messages[next];
        if (x.from == r) list.push_back(x.send);
        if (x.to == r) list.push_back(x.recv);
      }
    };
    for (const Action& a : lists[size_t(r)]) {
      if (!is_compute(a.kind)) continue;
      messages_until(when[{r, a.kind, a.mb, a.chunk}].first);
      list.push_back(a);
    }
    messages_until(std::numeric_limits<double>::infinity());
    out[size_t(r)] = pair_exchanges(list, pl, r);
  }
  return out;
}

std::vector<std::vector<Action>> runnable_in_order(std::vector<std::vector<Action>> lists, const Placement& pl, int m,
                                                   const PassCosts& costs) {
  if (in_order_problem(lists, pl).empty()) return lists;
  return place_messages_in_lockstep(lists, pl, m, costs);
}

}  // namespace gpt2
