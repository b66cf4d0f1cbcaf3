#include "perf/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/input_deck.hpp"
#include "perf/hardware.hpp"
#include "trace/hdf5_trace.hpp"
#include "parallel/stage_partition.hpp"

namespace gpt2 {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The mean of the values within [median / 2, 2 x median]: a step adds up many such times, so their
// mean (not their median) predicts it, but one preempted outlier should not.
double typical(const std::vector<double>& v) {
  const double med = median(v);
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (x >= 0.5 * med && x <= 2 * med) sum += x, ++n;
  return n ? sum / n : med;
}

// Total length of the union of intervals.
double covered(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, lo = 0, hi = -1e300;
  for (auto [a, b] : iv) {
    if (a > hi) {
      if (hi > lo) total += hi - lo;
      lo = a, hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

// parallel.sequence_parallel of the run's deck (/meta config), read by the deck reader.
bool sequence_parallel_in(const std::string& toml, const std::string& path) {
  bool sp = false;
  InputDeck::from_string(toml, path + " (/meta config)")
      .bind({{"parallel.sequence_parallel", &sp, ""}}, /*ignore_unknown=*/true);
  return sp;
}

// What calibration reads of the traced run's /meta beyond the Calibration's own fields.
struct TracedRun {
  int pp = 1;
  std::vector<double> stage_bytes, opt_bytes, pp_rank, stage_layers;  // per rank; blocks per stage
};

// The model, the grid, the microbatch and where the run ran, from /meta.
TracedRun read_meta(const TraceReader& f, const std::string& path, Calibration& c) {
  TracedRun run;
  c.model.n_layer = int(f.number("n_layer"));
  c.model.n_head = int(f.number("n_head"));
  c.model.n_embd = int(f.number("n_embd"));
  c.model.vocab_size = int(f.number("vocab_size"));
  c.seq_len = int(f.number("seq_len"));
  c.model.block_size = c.seq_len;
  const int dp = int(f.number("dp")), pp = int(f.number("pp")), mbs = int(f.number("microbatches"));
  c.tp = int(f.number("tp"));
  const int64_t batch = int64_t(f.number("batch_size"));
  if (dp < 1 || pp < 1 || c.tp < 1 || mbs < 1 || batch % (int64_t(dp) * mbs) != 0 || c.seq_len < 1 || c.model.n_layer < 1)
    fail_input(path, "inconsistent /meta (dp, pp, tp, microbatches, batch_size, seq_len)");
  run.pp = pp;
  c.microbatch = int(batch / dp / mbs);
  c.blas_threads = int(f.number("blas_threads"));
  c.execution_space = f.text("execution_space");
  c.device = f.text("device");
  c.sequence_parallel = c.tp > 1 && sequence_parallel_in(f.text("config"), path);
  run.stage_bytes = f.numbers("stage_param_bytes");
  run.opt_bytes = f.numbers("optimizer_bytes");
  run.pp_rank = f.numbers("pp_rank");
  run.stage_layers = f.numbers("stage_layers");
  std::map<std::string, int> ranks_on;  // (an older trace has no hosts)
  for (const std::string& h : f.texts("host")) ++ranks_on[h];
  c.hosts = int(ranks_on.size());
  if (c.hosts > 1)
    for (const auto& host : ranks_on) c.ranks_per_node = std::max(c.ranks_per_node, host.second);
  return run;
}

// The trace's codes of the event kinds calibration reads (the file names its kinds).
struct KindCodes {
  int fwd, bwd, opt, data, step, uf, ub, eval, ckpt, w, uw;
};

KindCodes kind_codes(const TraceReader& f, const std::string& path) {
  const KindCodes k{f.kind_code(EventKind::forward),       f.kind_code(EventKind::backward),
                    f.kind_code(EventKind::optimizer),     f.kind_code(EventKind::data),
                    f.kind_code(EventKind::step),          f.kind_code(EventKind::unit_forward),
                    f.kind_code(EventKind::unit_backward), f.kind_code(EventKind::eval),
                    f.kind_code(EventKind::checkpoint),    f.kind_code(EventKind::backward_weight),
                    f.kind_code(EventKind::unit_backward_weight)};
  if (k.fwd < 0 || k.bwd < 0 || k.step < 0) fail_input(path, "the trace names no forward, backward and step events");
  return k;
}

// The traced steps after the first (warm-up).
std::set<int> steps_after_warmup(const std::vector<TraceEvent>& ev, const KindCodes& k, const std::string& path) {
  std::set<int> steps;
  for (const TraceEvent& e : ev)
    if (e.kind == k.step) steps.insert(e.step);
  if (steps.size() < 2)
    fail_input(path, "calibration needs a trace of at least 2 training steps (the first is warm-up), got ", steps.size());
  steps.erase(steps.begin());
  return steps;
}

// The used steps' durations: of each unit kind's forward, input pass B and weight pass W (a split
// backward, zero-bubble schedules, is B and W: a unit's backward is their sum), of each rank's
// forwards and backwards, and of data loading.
struct Durations {
  std::vector<double> uf[3], ub[3], uw[3], data;
  std::map<int, std::vector<double>> fwd_by_rank, bwd_by_rank, w_by_rank;
};

Durations durations(const std::vector<TraceEvent>& ev, const KindCodes& k, const std::set<int>& steps, int L) {
  const int head_unit = L + 1;
  auto kind_of_unit = [&](int u) { return u == 0 ? 0 : u == head_unit ? 2 : 1; };
  Durations t;
  for (const TraceEvent& e : ev) {
    if (!steps.count(e.step)) continue;
    const double d = e.end - e.start;
    if (e.kind == k.uf && e.unit >= 0 && e.unit <= head_unit) t.uf[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k.ub && e.unit >= 0 && e.unit <= head_unit) t.ub[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k.uw && e.unit >= 0 && e.unit <= head_unit) t.uw[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k.fwd) t.fwd_by_rank[e.rank].push_back(d);
    else if (e.kind == k.bwd) t.bwd_by_rank[e.rank].push_back(d);
    else if (e.kind == k.w) t.w_by_rank[e.rank].push_back(d);
    else if (e.kind == k.data) t.data.push_back(d);
  }
  return t;
}

// With unit events: each unit kind's times, and the machine's noise.
void unit_times_from_units(const Durations& t, Calibration& c) {
  c.forward = {typical(t.uf[0]), typical(t.uf[1]), typical(t.uf[2])};
  c.backward = {typical(t.ub[0]) + typical(t.uw[0]), typical(t.ub[1]) + typical(t.uw[1]),
                typical(t.ub[2]) + typical(t.uw[2])};
  // Every block is the same work: their spread is the machine's noise (relative standard
  // deviation of the times typical() averages, forward and backward pooled).
  double sum = 0;
  int n = 0;
  for (const std::vector<double>* v : {&t.uf[1], &t.ub[1]}) {
    const double med = median(*v), mean = typical(*v);
    for (double d : *v)
      if (d >= 0.5 * med && d <= 2 * med) sum += (d / mean - 1) * (d / mean - 1), ++n;
  }
  c.jitter = n > 1 ? std::sqrt(sum / (n - 1)) : 0;
}

// Without them: each rank's median forward and backward shared over its units by FLOPs. A block's
// forward is block_cost, the head's (logits, loss and the LM head's two backward GEMMs) 3 *
// head_cost; a backward is twice the blocks' and next to nothing for the ends.
void unit_times_from_stages(Durations& t, const TracedRun& run, Calibration& c) {
  const int pp = run.pp;
  std::vector<int> layers(run.stage_layers.begin(), run.stage_layers.end());
  if (int(layers.size()) != pp) layers = partition_stages(c.model, pp, c.seq_len);
  std::vector<double> bf, bb, hf;
  for (auto& [rank, fw] : t.fwd_by_rank) {
    const int s = rank < int(run.pp_rank.size()) ? int(run.pp_rank[size_t(rank)]) : 0;
    const int n = layers[size_t(std::clamp(s, 0, pp - 1))];
    const double b = block_cost(c.model, c.seq_len), h = s == pp - 1 ? 3 * head_cost(c.model) : 0.0;
    const double fmed = typical(fw), bmed = typical(t.bwd_by_rank[rank]) + typical(t.w_by_rank[rank]);
    bf.push_back(fmed * b / (n * b + h));
    if (h > 0) hf.push_back(fmed * h / (n * b + h));
    bb.push_back(bmed / n);
  }
  c.forward = {0, typical(bf), typical(hf)};
  c.backward = {0, typical(bb), 0};
}

// Per rank and step: the optimizer's time per parameter of its shard (AdamW: 2 fp32 moments per
// parameter), and what lies outside every event (zeroing, the norm) per local parameter.
void optimizer_and_other(const std::vector<TraceEvent>& ev, const KindCodes& k, const std::set<int>& steps,
                         const TracedRun& run, Calibration& c) {
  std::vector<double> opt_per_param, other_per_param;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> inside;
  std::map<std::pair<int, int>, std::pair<double, double>> window;
  for (const TraceEvent& e : ev) {
    const bool unit = e.kind == k.uf || e.kind == k.ub || e.kind == k.uw;
    if (!steps.count(e.step) || unit || e.kind == k.eval || e.kind == k.ckpt) continue;
    if (e.kind == k.step) window[{e.rank, e.step}] = {e.start, e.end};
    else inside[{e.rank, e.step}].push_back({e.start, e.end});
    if (e.kind == k.opt && e.rank < int(run.opt_bytes.size()) && run.opt_bytes[size_t(e.rank)] > 0)
      opt_per_param.push_back((e.end - e.start) / (run.opt_bytes[size_t(e.rank)] / 8.0));
  }
  for (auto& [key, w] : window) {
    std::vector<std::pair<double, double>> iv;
    for (auto [a, b] : inside[key])
      if (a >= w.first - 1e-9 && b <= w.second + 1e-9) iv.push_back({a, b});
    const int r = key.first;
    if (r < int(run.stage_bytes.size()) && run.stage_bytes[size_t(r)] > 0)
      other_per_param.push_back(std::max(0.0, (w.second - w.first) - covered(iv)) / (run.stage_bytes[size_t(r)] / 4.0));
  }
  c.optimizer_per_param = typical(opt_per_param);
  // Waiting for other ranks also lies outside events: the least-waiting rank's share is the work.
  c.other_per_param = other_per_param.empty() ? 0 : *std::min_element(other_per_param.begin(), other_per_param.end());
}

}  // namespace

Calibration Calibration::load(const std::string& path) {
  const TraceReader f(path);
  Calibration c;
  c.path = path;
  const TracedRun run = read_meta(f, path, c);
  const KindCodes k = kind_codes(f, path);
  const std::vector<TraceEvent> ev = f.events();
  const std::set<int> steps = steps_after_warmup(ev, k, path);
  c.steps_used = int(steps.size());
  Durations t = durations(ev, k, steps, c.model.n_layer);
  if (t.fwd_by_rank.empty() || t.bwd_by_rank.empty())
    fail_input(path, "the trace has no forward and backward events after its first step");
  c.has_units = !t.uf[1].empty() && !t.ub[1].empty();
  if (c.has_units) unit_times_from_units(t, c);
  else unit_times_from_stages(t, run, c);
  c.data_per_sequence = typical(t.data) / c.microbatch;
  optimizer_and_other(ev, k, steps, run, c);
  if (!(c.forward.block > 0) || !(c.backward.block > 0))
    fail_input(path, "the trace's forward and backward events have no duration");
  return c;
}

std::string TracedSetup::apply_node_size(Hardware& hw) const {
  if (ranks_per_node < 1 || ranks_per_node == hw.devices_per_node) return "";
  const int given = hw.devices_per_node;
  hw.devices_per_node = ranks_per_node;
  return "node size: " + std::to_string(ranks_per_node) + " ranks per node, as the calibration run had on each of its " +
         std::to_string(hosts) + " hosts (" + hw.file + " says " + std::to_string(given) + ")";
}

void TracedSetup::require_shape(const ModelConfig& want, int seq_len, const std::string& config_name) const {
  ModelConfig a = model, b = want;
  a.block_size = b.block_size = 0;  // the rows of wpe do not change the work
  std::string why = b.diff(a);
  if (seq_len != this->seq_len)
    why += (why.empty() ? "" : ", ") + std::string("seq_len: ") + std::to_string(seq_len) + " vs " + std::to_string(this->seq_len);
  if (!why.empty())
    fail_input(path, "a calibration trace of another model shape (", why, ", ", config_name,
               " first, the trace second): record one with the same model and data.seq_len, e.g. gpt2 train ",
               config_name, " --set trace.file=calibration.h5 --set trace.units=true");
}

}  // namespace gpt2
