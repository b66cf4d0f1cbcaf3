#include "pipeline/pass_lists.hpp"

#include <deque>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "pipeline/simulator.hpp"

namespace gpt2 {

namespace {
bool is_message(ActionKind k) { return !is_compute(k); }
bool is_receive(ActionKind k) { return k == ActionKind::recv_activation || k == ActionKind::recv_grad; }

using Message = std::tuple<bool, int, int>;  // (gradient?, microbatch, destination virtual stage)

// One message of a group: to (send) or from (recv) `peer`.
struct Part {
  bool send;
  int peer;
  Message msg;
  bool matched = false;
};

// A rank's list as the executor issues it: computes (and the message each waits for, when it comes
// from another rank), and runs of consecutive messages each issued as one group (hand-overs between
// a rank's own chunks need no message).
struct Item {
  bool compute = true;
  std::vector<Part> parts;
  size_t action = 0;  // the first action of the item
  bool needs = false;
  Message input{};    // compute: the message it waits for
};

std::vector<Item> items_of(const std::vector<Action>& list, const Placement& pl, int rank) {
  std::vector<Item> out;
  const int S = pl.stages();
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const int k = pl.stage(rank, a.chunk);
    if (!is_message(a.kind)) {
      Item c{true, {}, i};
      if (a.kind == ActionKind::forward && k > 0 && pl.rank_of(k - 1) != rank) c.needs = true, c.input = {false, a.mb, k};
      if ((a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) && k < S - 1 && pl.rank_of(k + 1) != rank)
        c.needs = true, c.input = {true, a.mb, k};
      out.push_back(c);
      continue;
    }
    if (out.empty() || out.back().compute) out.push_back({false, {}, i});
    const bool paired = a.kind == ActionKind::send_activation_recv_grad || a.kind == ActionKind::send_grad_recv_activation;
    const bool sends = paired || a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad;
    if (sends) {
      const bool activation = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_activation_recv_grad;
      const int to = k + (activation ? 1 : -1);
      if (pl.rank_of(to) != rank) out.back().parts.push_back({true, pl.rank_of(to), {!activation, a.mb, to}});
    }
    if (paired || is_receive(a.kind)) {
      const bool grad = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
      const int at = pl.stage(rank, paired ? a.recv_chunk : a.chunk), from = at + (grad ? 1 : -1);
      if (pl.rank_of(from) != rank)
        out.back().parts.push_back({false, pl.rank_of(from), {grad, paired ? a.recv_mb : a.mb, at}});
    }
  }
  return out;
}

// NCCL's semantics: a rank's groups run one at a time in issue order, a message moves when the
// sender's and the receiver's current groups both hold it, issuing never blocks the host, and a
// compute waits for the group that receives its input.
std::string prove_ordered(const std::vector<std::vector<Action>>& lists, const Placement& pl) {
  const int p = int(lists.size());
  std::vector<std::vector<Item>> items(static_cast<size_t>(p));
  std::vector<std::map<Message, size_t>> received_in(static_cast<size_t>(p));  // message -> its group
  std::vector<std::vector<char>> retired(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    items[size_t(r)] = items_of(lists[size_t(r)], pl, r);
    retired[size_t(r)].assign(items[size_t(r)].size(), 0);
    for (size_t g = 0; g < items[size_t(r)].size(); ++g)
      for (const Part& x : items[size_t(r)][g].parts)
        if (!x.send) received_in[size_t(r)][x.msg] = g;
  }
  std::vector<size_t> pc(size_t(p), 0);
  std::vector<std::deque<size_t>> queue(static_cast<size_t>(p));  // issued groups, not complete, oldest first
  auto complete = [&](int r, size_t g) {
    for (const Part& x : items[size_t(r)][g].parts)
      if (!x.matched) return false;
    return true;
  };
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < p; ++r) {
      auto& mine = items[size_t(r)];
      while (pc[size_t(r)] < mine.size()) {
        const Item& it = mine[pc[size_t(r)]];
        if (it.compute && it.needs) {
          const auto g = received_in[size_t(r)].find(it.input);
          if (g == received_in[size_t(r)].end() || g->second > pc[size_t(r)] || !retired[size_t(r)][g->second]) break;
        }
        if (!it.compute && !it.parts.empty()) queue[size_t(r)].push_back(pc[size_t(r)]);
        ++pc[size_t(r)];
        progressed = true;
      }
    }
    // Match the current groups' messages.
    for (int r = 0; r < p; ++r) {
      while (!queue[size_t(r)].empty()) {
        const size_t g = queue[size_t(r)].front();
        for (Part& x : items[size_t(r)][g].parts) {
          if (x.matched || x.send || queue[size_t(x.peer)].empty()) continue;
          for (Part& y : items[size_t(x.peer)][queue[size_t(x.peer)].front()].parts)
            if (y.send && !y.matched && y.peer == r && y.msg == x.msg) {
              x.matched = y.matched = true;
              progressed = true;
              break;
            }
        }
        if (!complete(r, g)) break;
        retired[size_t(r)][g] = 1;
        queue[size_t(r)].pop_front();
        progressed = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < p; ++r) {
    if (queue[size_t(r)].empty() && pc[size_t(r)] >= items[size_t(r)].size()) continue;
    if (!stuck.str().empty()) stuck << "; ";
    if (queue[size_t(r)].empty()) {
      stuck << "rank " << r << " waits at pass " << items[size_t(r)][pc[size_t(r)]].action + 1;
      continue;
    }
    const Item& g = items[size_t(r)][queue[size_t(r)].front()];
    stuck << "rank " << r << "'s messages at pass " << g.action + 1 << " wait for";
    for (const Part& x : g.parts)
      if (!x.matched)
        stuck << " (" << (x.send ? "its send of the " : "the ") << (std::get<0>(x.msg) ? "gradient" : "activation")
              << " of microbatch " << std::get<1>(x.msg) << (x.send ? " to rank " : " from rank ") << x.peer << ")";
  }
  return stuck.str().empty() ? "" : "deadlock under NCCL's ordering (a rank's message groups one at a time, a send done once "
                                     "received): " + stuck.str();
}

}  // namespace

std::string prove_pass_lists(const std::vector<std::vector<Action>>& lists, const Placement& placement,
                             int microbatches, const std::vector<int>& max_in_flight, bool ordered,
                             std::vector<int>* peak) {
  const Simulation s = simulate(lists, microbatches, SimCosts{}, placement);
  if (peak) *peak = s.peak_in_flight;
  if (!s.problem.empty()) return s.problem;
  if (!s.fifo_consistent)
    return "a rank receives a peer's messages in another order than the peer sends them (NCCL matches in order)";
  if (ordered) return prove_ordered(lists, placement);
  for (size_t r = 0; r < max_in_flight.size() && r < s.peak_in_flight.size(); ++r)
    if (s.peak_in_flight[r] > max_in_flight[r]) {
      std::ostringstream os;
      os << "rank " << r << " holds " << s.peak_in_flight[r] << " microbatch-chunks at once, more than the "
         << max_in_flight[r] << " the schedule allows";
      return os.str();
    }
  return "";
}

PassLists build_pass_lists(const PipelineShape& shape) {
  const ScheduleEntry& e = ScheduleRegistry::get(shape.schedule, "parallel.schedule");
  PassLists out;
  out.placement = schedule_placement(e, shape.ranks, shape.virtual_stages);
  const int p = shape.ranks, m = shape.microbatches, chunks = out.placement.chunks;
  // The proof simulates every pass of every rank (its rounds grow with p^2): bounds keep validation
  // quick on any deck.
  constexpr int kMaxRanks = 4096;
  constexpr double kMaxPasses = 1 << 18;
  if (p > kMaxRanks) fail_input("parallel.pp", "at most ", kMaxRanks, " pipeline stages are supported, got ", p);
  if (double(p) * m * chunks > kMaxPasses)
    fail_input("parallel.microbatches", "parallel.pp x parallel.microbatches x chunks per rank = ", double(p) * m * chunks,
               " forward passes a step; at most ", kMaxPasses, " are supported");
  out.train = make_schedules(shape.schedule, p, m, chunks, shape.costs);
  std::vector<int> train_bound, eval_bound(size_t(p), 1);  // evaluation lets each go once it is sent
  for (int r = 0; r < p; ++r) {
    out.eval.push_back(forward_only_schedule(out.placement, m, r));
    train_bound.push_back(max_in_flight(e, ScheduleShape{p, m, r, chunks, shape.costs}));
  }
  const char* key = e.file.empty() ? "parallel.schedule" : "parallel.schedule_file";
  const std::string what = e.file.empty() ? shape.schedule : e.file;
  auto prove = [&](const char* lists, const std::vector<std::vector<Action>>& l, const std::vector<int>& bound,
                   std::vector<int>& peak) {
    const std::string problem = prove_pass_lists(l, out.placement, m, bound, shape.ordered, &peak);
    if (!problem.empty())
      fail_input(key, what, ": the ", lists, " pass lists for parallel.pp = ", p, ", parallel.microbatches = ", m,
                 chunks > 1 ? ", " + std::to_string(chunks) + " chunks per rank" : std::string(), " cannot run: ", problem,
                 shape.ordered ? " (parallel.comm = \"mpi\" runs it on the host)" : "");
  };
  prove("training", out.train, train_bound, out.train_peak);
  prove("evaluation", out.eval, eval_bound, out.eval_peak);
  return out;
}

}  // namespace gpt2
