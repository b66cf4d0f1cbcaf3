#include "pipeline/pass_lists.hpp"

#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "pipeline/nccl_order.hpp"
#include "pipeline/schedule_lists.hpp"
#include "pipeline/simulator.hpp"

namespace gpt2 {

std::string prove_pass_lists(const std::vector<std::vector<Action>>& lists, const Placement& placement,
                             int microbatches, const std::vector<int>& max_in_flight, std::vector<int>* peak) {
  const Simulation s = simulate(lists, microbatches, SimCosts{}, placement);
  if (peak) *peak = s.peak_in_flight;
  if (!s.problem.empty()) return s.problem;
  if (!s.fifo_consistent)
    return "a rank receives a peer's messages in another order than the peer sends them (NCCL matches in order)";
  if (std::string problem = in_order_problem(lists, placement); !problem.empty()) return problem;
  for (size_t r = 0; r < max_in_flight.size() && r < s.peak_in_flight.size(); ++r)
    if (s.peak_in_flight[r] > max_in_flight[r]) {
      std::ostringstream os;
      os << "rank " << r << " holds " << s.peak_in_flight[r] << " microbatch-chunks at once, more than the "
         << max_in_flight[r] << " the schedule allows";
      return os.str();
    }
  return "";
}

namespace {
PassLists build_and_prove(const PipelineShape& shape) {
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
  out.eval = runnable_in_order(std::move(out.eval), out.placement, m, shape.costs);
  const char* key = e.file.empty() ? "parallel.schedule" : "parallel.schedule_file";
  const std::string what = e.file.empty() ? shape.schedule : e.file;
  auto prove = [&](const char* lists, const std::vector<std::vector<Action>>& l, const std::vector<int>& bound,
                   std::vector<int>& peak) {
    const std::string problem = prove_pass_lists(l, out.placement, m, bound, &peak);
    if (!problem.empty())
      fail_input(key, what, ": the ", lists, " pass lists for parallel.pp = ", p, ", parallel.microbatches = ", m,
                 chunks > 1 ? ", " + std::to_string(chunks) + " chunks per rank" : std::string(), " cannot run: ", problem);
  };
  prove("training", out.train, train_bound, out.train_peak);
  prove("evaluation", out.eval, eval_bound, out.eval_peak);
  return out;
}
}  // namespace

// A built-in schedule's lists depend on the shape alone, so they are built and proven once a process
// (the deck's validation and the rank's engine ask for the same; `gpt2 info --accepts` asks for a
// few shapes thousands of times); a file's entry can be registered again under its name: never kept.
PassLists build_pass_lists(const PipelineShape& shape) {
  if (!ScheduleRegistry::get(shape.schedule, "parallel.schedule").file.empty()) return build_and_prove(shape);
  using Key = std::tuple<std::string, int, int, int, double, double, double>;
  static std::mutex mutex;
  static std::map<Key, std::pair<PassLists, std::exception_ptr>> built;
  const PassCosts& c = shape.costs;
  const Key key{shape.schedule, shape.ranks, shape.microbatches, shape.virtual_stages, c.forward, c.backward_input,
                c.backward_weight};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(key);
  if (it == built.end()) {
    if (built.size() >= 256) built.clear();  // (a bound: a process asks about a handful)
    std::pair<PassLists, std::exception_ptr> entry;
    try {
      entry.first = build_and_prove(shape);
    } catch (const InputError&) {
      entry.second = std::current_exception();
    }
    it = built.emplace(key, std::move(entry)).first;
  }
  if (it->second.second) std::rethrow_exception(it->second.second);
  return it->second.first;
}

}  // namespace gpt2
