#include "pipeline/pass_lists.hpp"

#include <deque>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "pipeline/simulator.hpp"

namespace gpt2 {

namespace {
bool is_message(ActionKind k) { return !is_compute(k); }

// One message of a group: to (send) or from (recv) `peer`, identified by (gradient?, microbatch,
// destination virtual stage).
struct Part {
  bool send;
  int peer;
  std::tuple<bool, int, int> msg;
  bool matched = false;
};

// A rank's list as the executor issues it: computes, and runs of consecutive messages each issued as
// one group (hand-overs between a rank's own chunks need no message).
struct Item {
  bool compute = true;
  std::vector<Part> parts;
  size_t action = 0;  // the first action of the item
};

std::vector<Item> items_of(const std::vector<Action>& list, const Placement& pl, int rank) {
  std::vector<Item> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (!is_message(a.kind)) {
      out.push_back({true, {}, i});
      continue;
    }
    if (out.empty() || out.back().compute) out.push_back({false, {}, i});
    const bool paired = a.kind == ActionKind::send_activation_recv_grad || a.kind == ActionKind::send_grad_recv_activation;
    const bool sends = paired || a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad;
    const bool receives = paired || a.kind == ActionKind::recv_activation || a.kind == ActionKind::recv_grad;
    if (sends) {
      const bool activation = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_activation_recv_grad;
      const int to = pl.stage(rank, a.chunk) + (activation ? 1 : -1);
      if (pl.rank_of(to) != rank) out.back().parts.push_back({true, pl.rank_of(to), {!activation, a.mb, to}});
    }
    if (receives) {
      const bool grad = a.kind == ActionKind::recv_grad || a.kind == ActionKind::send_activation_recv_grad;
      const int at = pl.stage(rank, paired ? a.recv_chunk : a.chunk), from = at + (grad ? 1 : -1);
      if (pl.rank_of(from) != rank)
        out.back().parts.push_back({false, pl.rank_of(from), {grad, paired ? a.recv_mb : a.mb, at}});
    }
  }
  return out;
}
}  // namespace

// NCCL's semantics: a rank's groups run one at a time in issue order, a message moves when the
// sender's and the receiver's current groups both hold it, and the host waits for a group that
// receives (its compute needs the data) but not for one that only sends.
namespace {
std::string prove_ordered(const std::vector<std::vector<Action>>& lists, const Placement& pl) {
  const int p = int(lists.size());
  std::vector<std::vector<Item>> items(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) items[size_t(r)] = items_of(lists[size_t(r)], pl, r);
  std::vector<size_t> pc(size_t(p), 0);
  std::vector<std::deque<size_t>> queue(static_cast<size_t>(p));  // issued groups, not complete, oldest first
  std::vector<long> waits(size_t(p), -1);             // the group the host waits for
  auto complete = [&](int r, size_t g) {
    for (const Part& x : items[size_t(r)][g].parts)
      if (!x.matched) return false;
    return true;
  };
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int r = 0; r < p; ++r) {
      auto& mine = items[size_t(r)];
      while (true) {
        if (waits[size_t(r)] >= 0) {
          if (!complete(r, size_t(waits[size_t(r)]))) break;
          waits[size_t(r)] = -1;
        }
        if (pc[size_t(r)] >= mine.size()) break;
        const size_t i = pc[size_t(r)]++;
        progressed = true;
        if (mine[i].compute || mine[i].parts.empty()) continue;
        queue[size_t(r)].push_back(i);
        for (const Part& x : mine[i].parts)
          if (!x.send) waits[size_t(r)] = long(i);
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
      stuck << "rank " << r << " stops at pass " << items[size_t(r)][pc[size_t(r)] - 1].action + 1;
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
