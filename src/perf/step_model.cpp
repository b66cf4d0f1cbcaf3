#include "perf/step_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include "model/param_layout.hpp"
#include "model/stage_layout.hpp"
#include "parallel/stage_partition.hpp"
#include "perf/simulator.hpp"
#include "runtime/schedule.hpp"
#include "runtime/sharding.hpp"
#include "runtime/topology.hpp"

namespace gpt2 {

double StepPrediction::peak_memory() const {
  double m = 0;
  for (const RankMemory& r : stage_memory) m = std::max(m, r.total());
  return m;
}

std::vector<double> StepPrediction::memory_per_rank() const {
  const GridShape g{layout.dp, layout.pp, layout.tp};
  std::vector<double> out;
  if (stage_memory.empty()) return out;
  for (long long r = 0; r < g.world(); ++r)
    out.push_back(stage_memory[size_t(Topology::coords_of(g, int(r)).pp)].total());
  return out;
}

namespace {

// Stage layouts by (model, blocks, tp), made once: a plan asks for the same few thousand times.
const StageLayout& stage_layout(const ModelConfig& m, int first, int end, int tp) {
  using ModelKey = std::tuple<int, int, int, int, int>;
  static std::map<ModelKey, std::unique_ptr<ParamLayout>> models;
  static std::map<std::tuple<ModelKey, int, int, int>, std::unique_ptr<StageLayout>> stages;
  const ModelKey mk{m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.block_size};
  auto& g = models[mk];
  if (!g) g = std::make_unique<ParamLayout>(m);
  auto& sl = stages[{mk, first, end, tp}];
  if (!sl) sl = std::make_unique<StageLayout>(*g, first, end, TpSplit{tp, 0});
  return *sl;
}

// A stage's parts for one microbatch, in the order the trainer runs them.
struct Segment {
  double compute = 0;   // the unit's work and its tensor-parallel collectives
  double gather = 0;    // ZeRO-3: its parameters all-gathered first
  std::vector<double> reductions;  // gradient reductions launched when it ends
};

// Compute plus what ZeRO-3's gathers add: each unit's gather is issued while the unit before it
// computes; the part the hardware cannot overlap adds in full.
double run_time(const std::vector<Segment>& segs, double overlap) {
  double t = 0, gathers = 0, waits = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    t += segs[i].compute;
    gathers += segs[i].gather;
    waits += i == 0 ? segs[i].gather : std::max(0.0, segs[i].gather - segs[i - 1].compute);
  }
  return t + (1 - overlap) * gathers + overlap * waits;
}

struct StagePlan {
  std::vector<Segment> forward, backward;
  double forward_s = 0, backward_s = 0;  // compute only (for the bubble and compute_s)
  double local_params = 0, shard_params = 0;
  double tied_elems = 0, replicated_elems = 0;
  int last_forward_mb = -1, last_backward_mb = -1;
};

struct Detail {
  double step = 0, bubble = 0, compute = 0;
  std::vector<int> peak_in_flight;
  std::vector<double> stage_end;
  std::string problem;
};

Detail simulate_step(const CostModel& cm, const Layout& l, const std::vector<int>& layers) {
  const Workload& w = cm.workload();
  const Hardware& hw = cm.hardware();
  const ModelConfig& m = w.model;
  const int p = l.pp, mbs = l.microbatches, b = int(w.batch / l.dp / mbs), L = m.n_layer;
  const ShardPolicy policy = sharding_policy(l.zero);
  const double ov = hw.comm_overlap;
  const double slow = cm.node_slowdown(l);  // compute of a rank whose node is busy
  auto unit = [&](int u) {
    UnitTime t = cm.unit_time(u, b, l);
    t.forward *= slow, t.backward_input *= slow, t.backward_weight *= slow;
    return t;
  };
  const double grad_bytes = l.bytes_per_value();
  const double bucket = (l.bucket_mb > 0 ? l.bucket_mb : ov < 0.5 ? 1.0 : 25.0) * 1048576.0;
  const int dp_stride = l.tp * l.pp;
  // A unit's collective over dp, one per bucket (ShardLayout cuts every unit into buckets).
  auto bucketed = [&](double bytes, double (CostModel::*op)(double, int, int) const) {
    if (l.dp <= 1) return 0.0;
    const double buckets = std::max(1.0, std::ceil(bytes / bucket));
    return (cm.*op)(bytes, l.dp, dp_stride) + (buckets - 1) * (cm.*op)(0, l.dp, dp_stride);
  };
  // Its gradient reduction (all-reduce, or reduce-scatter when the optimizer state is sharded) ...
  auto reduce = [&](double elems) {
    return bucketed(elems * grad_bytes, policy.optimizer ? &CostModel::reduce_scatter : &CostModel::all_reduce);
  };
  // ... and ZeRO-3's gather of its parameters before each use.
  auto gather = [&](double elems) {
    return policy.params ? bucketed(elems * l.bytes_per_value(), &CostModel::all_gather) : 0.0;
  };

  std::vector<StagePlan> plans(static_cast<size_t>(p));
  for (int s = 0, first = 0; s < p; first += layers[size_t(s)], ++s) {
    const StageLayout& sl = stage_layout(m, first, first + layers[size_t(s)], l.tp);
    StagePlan& sp = plans[size_t(s)];
    auto unit_elems = [&](UnitKind k, int layer = -1) {
      const int u = sl.unit_index(k, layer);
      return u < 0 ? 0.0 : double(sl.units()[size_t(u)].range.size());
    };
    sp.local_params = double(sl.local_size());
    sp.shard_params = policy.optimizer ? sp.local_params / l.dp : sp.local_params;
    if (p > 1) sp.tied_elems = sl.has_embedding() ? unit_elems(UnitKind::wte) : unit_elems(UnitKind::tied_wte);
    if (policy.optimizer && p > 1) sp.tied_elems /= l.dp;
    for (const TensorInfo& t : sl.tensors())
      if (t.replicated && l.tp > 1) sp.replicated_elems += double(t.range.size());
    const double data = (sl.has_embedding() || sl.has_head()) ? slow * cm.data(b) : 0.0;
    if (sl.has_embedding()) {
      const UnitTime t = unit(0);
      sp.forward.push_back({data + t.forward + cm.tp_forward(0, b, l),
                            gather(unit_elems(UnitKind::wte) + unit_elems(UnitKind::wpe)), {}});
    }
    for (int layer = sl.first_layer(); layer < sl.end_layer(); ++layer) {
      const UnitTime t = unit(1 + layer);
      sp.forward.push_back({t.forward + cm.tp_forward(1 + layer, b, l), gather(unit_elems(UnitKind::block, layer)), {}});
    }
    if (sl.has_head()) {
      const UnitTime t = unit(L + 1);
      const int wu = sl.head_wte_unit();
      const double head_wte = double(sl.units()[size_t(wu)].range.size());
      Segment seg{(sl.has_embedding() ? 0.0 : data) + t.forward + cm.tp_forward(L + 1, b, l),
                  gather(unit_elems(UnitKind::final_norm) + head_wte), {}};
      // The LM head's copy of wte (several stages) has its whole gradient after the head's forward.
      if (sl.units()[size_t(wu)].grads_final_in_forward()) seg.reductions.push_back(reduce(head_wte));
      sp.forward.push_back(seg);
      const UnitTime tb = unit(L + 1);
      sp.backward.push_back({tb.backward() + cm.tp_backward(L + 1, b, l), gather(unit_elems(UnitKind::final_norm)),
                             {reduce(unit_elems(UnitKind::final_norm))}});
    }
    for (int layer = sl.end_layer() - 1; layer >= sl.first_layer(); --layer) {
      const UnitTime t = unit(1 + layer);
      const double e = unit_elems(UnitKind::block, layer);
      sp.backward.push_back({t.backward() + cm.tp_backward(1 + layer, b, l), gather(e), {reduce(e)}});
    }
    if (sl.has_embedding()) {
      const UnitTime t = unit(0);
      sp.backward.push_back({t.backward() + cm.tp_backward(0, b, l), 0,
                             {reduce(unit_elems(UnitKind::wpe)), reduce(unit_elems(UnitKind::wte))}});
    }
    for (const Segment& g : sp.forward) sp.forward_s += g.compute;
    for (const Segment& g : sp.backward) sp.backward_s += g.compute;
  }

  std::vector<std::vector<Action>> actions;
  for (int s = 0; s < p; ++s) {
    actions.push_back(make_schedule(l.schedule, p, mbs, s));
    for (const Action& a : actions.back()) {
      if (a.kind == ActionKind::forward) plans[size_t(s)].last_forward_mb = a.mb;
      if (a.kind == ActionKind::backward) plans[size_t(s)].last_backward_mb = a.mb;
    }
  }
  // Does this compute action launch its segments' reductions? ZeRO 0/1 reduce the accumulated
  // gradient once, after the step's last microbatch; 2/3 each microbatch's.
  auto launches = [&](int s, const Action& a) {
    const StagePlan& sp = plans[size_t(s)];
    if (policy.grads) return true;
    return a.kind == ActionKind::forward ? a.mb == sp.last_forward_mb : a.mb == sp.last_backward_mb;
  };
  auto segments = [&](int s, const Action& a) -> const std::vector<Segment>& {
    return a.kind == ActionKind::forward ? plans[size_t(s)].forward : plans[size_t(s)].backward;
  };
  SimulationCosts costs;
  costs.compute = [&](int s, const Action& a) {
    const auto& segs = segments(s, a);
    double t = run_time(segs, ov);
    if (launches(s, a))
      for (const Segment& g : segs)
        for (double r : g.reductions) t += (1 - ov) * r;
    return t;
  };
  const double act_bytes =
      double(b) * w.seq_len / (l.sequence_parallel ? l.tp : 1) * m.n_embd * l.bytes_per_value();
  costs.transfer = [&](int, int) { return cm.send(act_bytes, l.tp); };
  for (int s = 0; s < p; ++s) costs.start.push_back(slow * cm.gradient_pass(plans[size_t(s)].local_params));  // zeroing
  const Simulation sim = simulate(actions, mbs, costs);

  Detail d;
  if (sim.deadlock || !sim.problem.empty()) {
    d.problem = "schedule " + l.schedule + ": " + sim.problem;
    return d;
  }
  d.peak_in_flight = sim.peak_in_flight;
  // The data-parallel channel of each stage: reductions one after another, from their launch.
  std::vector<double> ready(size_t(p), 0.0);
  double t0 = 1e300, t1 = -1e300, busy = 0;
  std::vector<std::vector<const SimulatedCompute*>> by_stage(static_cast<size_t>(p));
  for (const SimulatedCompute& c : sim.computes) by_stage[size_t(c.stage)].push_back(&c);
  for (int s = 0; s < p; ++s) {
    double channel = 0;
    for (const SimulatedCompute* cp : by_stage[size_t(s)]) {
      const SimulatedCompute& c = *cp;
      busy += c.end - c.start;
      if (c.kind == ActionKind::forward) t0 = std::min(t0, c.start);
      else t1 = std::max(t1, c.end);
      const Action a{c.kind, c.mb};
      if (!launches(s, a)) continue;
      double at = c.start;
      for (const Segment& g : segments(s, a)) {
        at += g.compute + (1 - ov) * g.gather;
        for (double r : g.reductions) {
          at += (1 - ov) * r;
          channel = std::max(channel, at) + ov * r;
        }
      }
    }
    ready[size_t(s)] = std::max(sim.finish[size_t(s)], channel);
    d.compute = std::max(d.compute, plans[size_t(s)].forward_s * mbs + plans[size_t(s)].backward_s * mbs);
  }
  d.bubble = p > 1 && t1 > t0 ? 1.0 - busy / (p * (t1 - t0)) : 0.0;
  // Sequence parallelism: the replicated tensors' partial gradients summed over tp.
  for (int s = 0; s < p; ++s) ready[size_t(s)] += cm.all_reduce(plans[size_t(s)].replicated_elems * 4, l.tp, 1);
  if (p > 1) {  // the two wte gradients of the pipeline's ends summed
    const double both = std::max(ready[0], ready[size_t(p - 1)]) +
                        cm.all_reduce(plans[0].tied_elems * 4, 2, l.tp * (p - 1));
    ready[0] = ready[size_t(p - 1)] = both;
  }
  std::vector<double> post(size_t(p), 0.0), own(size_t(p), 0.0);
  for (int s = 0; s < p; ++s) {
    const StagePlan& sp = plans[size_t(s)];
    post[size_t(s)] = ready[size_t(s)] + slow * cm.gradient_pass(sp.local_params);  // the norm
    own[size_t(s)] = post[size_t(s)] + slow * cm.optimizer(sp.shard_params) +
                     (policy.optimizer && !policy.params ? bucketed(sp.local_params * 4, &CostModel::all_gather) : 0.0);
  }
  // The loss and norm all-reduces: every stage's contribution, then each stage's optimizer is done.
  const double scalars = cm.all_reduce(16, l.dp, dp_stride) + cm.all_reduce(8, l.tp, 1) + cm.all_reduce(16, p, l.tp);
  const double last_post = *std::max_element(post.begin(), post.end());
  for (int s = 0; s < p; ++s) d.stage_end.push_back(std::max(own[size_t(s)], last_post + scalars));
  d.step = *std::max_element(d.stage_end.begin(), d.stage_end.end());
  return d;
}

size_t pad(size_t n) { return (n + 63) / 64 * 64; }

// Mirrors Stage::make_activations (one microbatch's saved activations) and the Stage's scratch.
void activation_memory(const Workload& w, const Layout& l, const StageLayout& sl, int b, double& per_mb,
                       double& scratch) {
  const ModelConfig& c = w.model;
  const size_t tp = size_t(l.tp), T = size_t(w.seq_len), N = size_t(b) * T, C = size_t(c.n_embd);
  const size_t R = l.sequence_parallel ? N / tp : N;
  const size_t att = size_t(b) * size_t(c.n_head) / tp * T * T;
  const size_t nblocks = size_t(sl.end_layer() - sl.first_layer());
  const size_t per_block = pad(R * C) * 4 + pad(N * 3 * C / tp) + pad(att) + pad(N * C / tp) + pad(N * 4 * C / tp) * 2 + pad(R) * 4;
  const size_t head = sl.has_head() ? pad(R) * 2 + pad(R * C) : 0;
  const double bytes = l.bytes_per_value();
  per_mb = double(pad(R * C) + nblocks * per_block + head) * bytes;
  size_t s = N * C * 2 + N * 3 * C / tp + att + N * 4 * C / tp + N * C / tp;
  if (tp > 1) s += N * C;
  if (l.sequence_parallel) s += N * C;
  if (sl.has_head()) s += N * C + N * size_t(sl.local_vocab()) + N + (tp > 1 ? 3 * N : 0);
  scratch = double(s) * bytes;
}

}  // namespace

std::string check_layout(const Workload& w, const Layout& l) {
  const ModelConfig& m = w.model;
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.microbatches < 1) return "dp, tp, pp and microbatches must be >= 1";
  if (l.precision != "fp32" && l.precision != "bf16") return "precision must be fp32 or bf16, got " + l.precision;
  if (!ScheduleRegistry::find(l.schedule)) return "unknown schedule " + l.schedule + " (expected " + ScheduleRegistry::choices() + ")";
  if (!ShardingRegistry::find(std::to_string(l.zero))) return "unknown ZeRO level " + std::to_string(l.zero);
  if (l.pp > m.n_layer) return "more stages (" + std::to_string(l.pp) + ") than blocks (" + std::to_string(m.n_layer) + ")";
  if (m.n_head % l.tp || m.padded_vocab() % l.tp) return "tp " + std::to_string(l.tp) + " does not divide the heads and the padded vocabulary";
  if (w.batch % (int64_t(l.dp) * l.microbatches))
    return "the batch of " + std::to_string(w.batch) + " sequences does not split into dp x microbatches = " +
           std::to_string(l.dp) + " x " + std::to_string(l.microbatches);
  if (l.sequence_parallel && (w.batch / l.dp / l.microbatches * w.seq_len) % l.tp)
    return "sequence parallelism needs a microbatch's tokens divisible by tp";
  if (!l.stage_layers.empty()) {
    if (int(l.stage_layers.size()) != l.pp) return "stage_layers must list one count per stage";
    int sum = 0;
    for (int n : l.stage_layers) {
      if (n < 1) return "every stage needs at least one block";
      sum += n;
    }
    if (sum != m.n_layer) return "stage_layers must add up to n_layer";
  }
  if (l.zero > 0 && l.dp > 1) {  // every unit (a block, wte, wpe, the final norm) splits evenly over dp
    const StageLayout& whole = stage_layout(m, 0, m.n_layer, l.tp);
    for (const Unit& u : whole.units())
      if (u.range.size() % size_t(l.dp))
        return std::string("ZeRO needs every unit split evenly over dp ") + std::to_string(l.dp) + " (" + u.name() +
               " has " + std::to_string(u.range.size()) + " values)";
  }
  return "";
}

double flops_per_token(const Workload& w) {
  const ModelConfig& m = w.model;
  const double params = double(stage_layout(m, 0, m.n_layer, 1).global().total());
  return 6.0 * params + 12.0 * m.n_layer * m.n_embd * double(w.seq_len);
}

std::vector<int> stage_layers_of(const Workload& w, const Layout& l) {
  if (!l.stage_layers.empty()) return l.stage_layers;
  static std::map<std::tuple<int, int, int, int, int, int>, std::vector<int>> splits;  // the partitioner's, made once
  const ModelConfig& m = w.model;
  auto& v = splits[{m.n_layer, m.n_embd, m.padded_vocab(), m.n_head, w.seq_len, l.pp}];
  if (v.empty()) v = partition_stages(m, l.pp, w.seq_len);
  return v;
}

std::vector<RankMemory> predict_memory(const Workload& w, const Layout& l, const std::vector<int>& layers,
                                       const std::vector<int>& in_flight) {
  const ShardPolicy policy = sharding_policy(l.zero);
  const int b = int(w.batch / l.dp / l.microbatches);
  std::vector<RankMemory> out;
  for (int s = 0, first = 0; s < l.pp; first += layers[size_t(s)], ++s) {
    const StageLayout& sl = stage_layout(w.model, first, first + layers[size_t(s)], l.tp);
    const double psi = double(sl.local_size()), shard = policy.optimizer ? psi / l.dp : psi;
    double largest = 0;
    for (const Unit& u : sl.units()) largest = std::max(largest, double(u.range.size()));
    RankMemory r;
    if (l.precision == "fp32") {  // as ParamStore::memory() counts it
      r.params = 4 * ((policy.params ? 0 : psi) + (policy.optimizer ? shard : 0));
      r.grads = 4 * ((policy.grads ? 0 : psi) + (policy.optimizer ? shard : 0));
      r.optimizer = 8 * shard;
    } else {  // mixed precision as the ZeRO paper counts it: 2 + 2 + 12 bytes a parameter
      r.params = 2 * (policy.params ? shard : psi);
      r.grads = 2 * (policy.grads ? shard : psi);
      r.optimizer = 12 * shard;
    }
    double per_mb = 0, scratch = 0;
    activation_memory(w, l, sl, b, per_mb, scratch);
    r.activations = per_mb * in_flight[size_t(s)];
    // ZeRO's pooled workspaces: about two units' gradients (2, 3) and two gathered units (3).
    r.workspace = scratch + largest * 4 * ((policy.grads ? 2 : 0) + (policy.params ? 2 : 0));
    out.push_back(r);
  }
  return out;
}

StepPrediction predict_step(const CostModel& cm, const Layout& l, bool exposed_comm) {
  const Workload& w = cm.workload();
  StepPrediction out;
  out.layout = l;
  out.problem = check_layout(w, l);
  if (!out.problem.empty()) return out;
  out.stage_layers = stage_layers_of(w, l);
  const Detail d = simulate_step(cm, l, out.stage_layers);
  if (!d.problem.empty()) {
    out.problem = d.problem;
    return out;
  }
  out.step_s = d.step;
  out.tokens_per_s = double(w.batch) * w.seq_len / d.step;
  out.bubble = d.bubble;
  out.compute_s = d.compute;
  out.peak_in_flight = d.peak_in_flight;
  out.stage_end = d.stage_end;
  const double peak = cm.hardware().peak(l.precision);
  out.mfu = peak > 0 ? out.tokens_per_s * flops_per_token(w) / (double(l.world()) * peak) : 0;
  out.stage_memory = predict_memory(w, l, out.stage_layers, d.peak_in_flight);
  if (exposed_comm) add_exposed_comm(cm, out);
  return out;
}

void add_exposed_comm(const CostModel& cm, StepPrediction& p) {
  if (!p.valid() || p.exposed_comm_known) return;
  CostModel free = cm;
  free.set_free_communication(true);
  const Detail f = simulate_step(free, p.layout, p.stage_layers);
  p.exposed_comm_s = std::max(0.0, p.step_s - f.step);
  p.exposed_comm_known = true;
}

}  // namespace gpt2
