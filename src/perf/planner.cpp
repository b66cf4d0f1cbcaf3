#include "perf/planner.hpp"

#include <algorithm>

#include "pipeline/schedule.hpp"
#include "parallel/zero.hpp"

namespace gpt2 {

namespace {
std::vector<long long> divisors(long long n) {
  std::vector<long long> out;
  for (long long d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      out.push_back(d);
      if (d != n / d) out.push_back(n / d);
    }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::vector<Layout> enumerate_layouts(const Workload& w, const Hardware& hw, const PlanOptions& o) {
  std::vector<Precision> precisions = o.precisions;
  if (precisions.empty())
    for (Precision p : {Precision::fp32, Precision::bf16})
      if (hw.supports(p)) precisions.push_back(p);
  std::vector<int> levels;
  for (const ZeroLevel& z : zero_levels()) levels.push_back(z.level);
  const std::vector<std::string> schedules = ScheduleRegistry::names();
  const std::string single = ScheduleRegistry::find("1f1b") ? "1f1b" : schedules.front();  // pp 1: all alike
  std::vector<Layout> out;
  for (long long tp : divisors(o.devices)) {
    if (tp > hw.devices_per_node || w.model.n_head % tp || w.model.padded_vocab() % tp) continue;
    for (long long pp : divisors(o.devices / tp)) {
      if (pp > w.model.n_layer) continue;
      for (long long cp : divisors(o.devices / tp / pp)) {
      if (cp > o.max_cp || w.seq_len % (2 * cp)) continue;
      const long long dp = o.devices / tp / pp / cp;
      if (w.batch % dp) continue;
      for (long long m : divisors(w.batch / dp)) {
        if (m > o.max_microbatches) break;
        for (const std::string& sched : pp == 1 ? std::vector<std::string>{single} : schedules)
          // interleaved: 2 and 4 chunks a rank; the others run their own
          for (int v : ScheduleRegistry::find(sched)->chunks == 0 ? std::vector<int>{2, 4} : std::vector<int>{1})
            for (Precision prec : precisions)
              for (bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
                for (Recompute rc : o.recompute)
                  for (int zero : levels) {  // innermost: levels 0-2 often share one pipeline simulation
                    if (zero > 0 && dp == 1) continue;
                    Layout l;
                    l.dp = int(dp), l.tp = int(tp), l.pp = int(pp), l.zero = zero, l.microbatches = int(m);
                    l.schedule = sched, l.virtual_stages = v, l.precision = prec, l.sequence_parallel = sp;
                    l.recompute = rc, l.cp = int(cp);
                    if (check_layout(w, l).empty()) out.push_back(l);
                  }
      }
      }
    }
  }
  return out;
}

Plan plan_layouts(const CostModel& cm, const PlanOptions& o) {
  Plan plan;
  const double budget = o.usable_memory * cm.hardware().memory_bytes;
  for (const Layout& l : enumerate_layouts(cm.workload(), cm.hardware(), o)) {
    ++plan.considered;
    StepPrediction lower;  // with one microbatch in flight: what the schedule can only add to
    lower.layout = l;
    lower.stage_memory = predict_memory(cm.workload(), l, std::vector<int>(size_t(l.pp), 1));
    if (lower.peak_memory() > budget) {
      if (plan.too_big == 0 || lower.peak_memory() < plan.smallest_too_big.peak_memory()) plan.smallest_too_big = lower;
      ++plan.too_big;
      if (o.predict_too_big) {
        StepPrediction p = predict_step(cm, l, false);
        if (p.valid()) plan.too_big_layouts.push_back(std::move(p));
      }
      continue;
    }
    StepPrediction p = predict_step(cm, l, false);
    if (!p.valid()) {
      ++plan.invalid;
      continue;
    }
    if (p.peak_memory() > budget) {
      if (plan.too_big == 0 || p.peak_memory() < plan.smallest_too_big.peak_memory()) plan.smallest_too_big = p;
      ++plan.too_big;
      if (o.predict_too_big) plan.too_big_layouts.push_back(std::move(p));
      continue;
    }
    plan.ranked.push_back(std::move(p));
  }
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(), [](const StepPrediction& a, const StepPrediction& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    return a.peak_memory() < b.peak_memory();
  });
  for (size_t i = 0; i < plan.ranked.size() && i < o.detailed; ++i) add_exposed_comm(cm, plan.ranked[i]);
  return plan;
}

}  // namespace gpt2
