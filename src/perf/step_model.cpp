#include "perf/step_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "model/stage_layout.hpp"
#include "parallel/stage_partition.hpp"
#include "perf/rank_pipeline.hpp"
#include "perf/rank_plan.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_lists.hpp"
#include "parallel/zero.hpp"

namespace gpt2 {

namespace {

// ZeRO-3: one pass over its units as the trainer runs them, with the rank's data-parallel channel
// (every gather and reduction, one after another in issue order: they share the links). The first
// unit's gather is issued as the pass starts, each next one when the unit before it starts (the
// prefetch; without it, when the unit before it ends); a unit starts once its parameters are in; its
// reductions are issued when it ends. The
// share of each the hardware cannot overlap (1 - overlap) stalls the compute that issues it.
// `clock` and `channel` (when the channel is free) advance on the rank's own compute clock, which
// counts no idle time: a pipeline rank's channel keeps its backlog through a wait (pessimistic there).
double zero3_time(const std::vector<Segment>& segs, bool reduce, bool prefetch, double overlap, double& clock,
                  double& channel) {
  const double start = clock;
  double t = clock, in = 0, next_in = 0;  // when this unit's and the next one's parameters are in
  auto gather = [&](size_t i) {
    t += (1 - overlap) * segs[i].gather;
    channel = std::max(channel, t) + overlap * segs[i].gather;
    return channel;
  };
  for (size_t i = 0; i < segs.size(); ++i) {
    in = i == 0 ? gather(0) : next_in;
    t = std::max(t, in);
    if (prefetch && i + 1 < segs.size()) next_in = gather(i + 1);
    t += segs[i].compute;
    if (!prefetch && i + 1 < segs.size()) next_in = gather(i + 1);
    if (reduce)
      for (double red : segs[i].reductions) {
        t += (1 - overlap) * red;
        channel = std::max(channel, t) + overlap * red;
      }
  }
  clock = t;
  return t - start;
}

// Every rank's action list, made once per (schedule, ranks, microbatches, chunks, pass costs): a
// plan prices thousands of layouts that share a few hundred pipelines, and making (and proving) the
// lists costs more than simulating them. (Not thread-safe, as the planner is single-threaded.)
const std::vector<std::vector<Action>>& schedules_of(const std::string& name, int p, int m, int chunks, const Workload& w) {
  using Key = std::tuple<std::string, int, int, int, int, int>;
  static std::map<Key, std::vector<std::vector<Action>>> made;
  const Key key{name, p, m, chunks, w.model.n_embd, w.seq_len};
  auto it = made.find(key);
  if (it == made.end()) it = made.emplace(key, make_schedules(name, p, m, chunks, pass_costs(w.model.n_embd, w.seq_len))).first;
  return it->second;
}

// The pipeline simulation of a layout. Where its passes cost the same whatever the ZeRO level --
// outside ZeRO-3, on hardware whose communication all overlaps (nothing a reduction launches stalls
// the compute) -- levels 0, 1 and 2 share it: the last one made is kept and reused when only the
// level differs (the planner enumerates the levels innermost).
const Simulation& simulation(const CostModel& cm, const Layout& l, const std::vector<std::vector<Action>>& actions,
                             int microbatches, const SimCosts& costs, const Placement& place, bool shared) {
  static Simulation last;
  static std::string last_key;
  if (!shared) {
    last_key.clear();
    last = simulate(actions, microbatches, costs, place);
    return last;
  }
  const std::string key = std::to_string(cm.serial()) + (cm.free_communication() ? "f" : "") + '|' + l.pass_key();
  if (key != last_key) {
    last = simulate(actions, microbatches, costs, place);
    last_key = key;
  }
  return last;
}

struct Detail {
  double step = 0, bubble = 0, compute = 0;
  std::vector<int> peak_in_flight;
  std::vector<double> stage_end;
  std::string problem;
};

StepContext step_context(const CostModel& cm, const Layout& l, const Pipeline& pipe) {
  const Workload& w = cm.workload();
  const int mbs = l.microbatches, b = int(w.batch / l.dp / mbs);
  return {cm, l, w, w.model, pipe.placement, l.pp, mbs, b, w.model.n_layer, zero_policy(l.zero),
          cm.hardware().comm_overlap, cm.node_slowdown(l), l.dp * l.cp, l.dp > 1 ? l.tp * l.pp * l.cp : l.tp,
          cm.cp_forward(b, l), cm.cp_backward(b, l)};
}

// Each chunk's last forward and last backward or weight pass in the schedule.
void mark_last_passes(const std::vector<std::vector<Action>>& actions, std::vector<RankPlan>& plans) {
  for (size_t r = 0; r < plans.size(); ++r) {
    for (const Action& a : actions[r]) {
      ChunkPlan& cp = plans[r].chunks[size_t(a.chunk)];
      if (a.kind == ActionKind::forward) cp.last_forward_mb = a.mb;
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight) cp.last_backward_mb = a.mb;
    }
  }
}

// The segments a rank's compute action runs, and whether it launches their reductions.
struct Passes {
  const StepContext& s;
  const std::vector<RankPlan>& plans;
  const ChunkPlan& chunk(int r, const Action& a) const { return plans[size_t(r)].chunks[size_t(a.chunk)]; }
  const std::vector<Segment>& segments(int r, const Action& a) const {
    const ChunkPlan& cp = chunk(r, a);
    switch (a.kind) {
      case ActionKind::forward: return cp.forward;
      case ActionKind::backward_input: return cp.input;
      case ActionKind::backward_weight: return cp.weight;
      default: return cp.backward;
    }
  }
  // ZeRO 0/1 reduce the accumulated gradient once, after the step's last microbatch; 2/3 each
  // microbatch's.
  bool launches(int r, const Action& a) const {
    const ChunkPlan& cp = chunk(r, a);
    if (s.policy.grads) return true;
    if (s.l.reduce_after_backward) return false;  // all of them once the rank's passes are done
    return a.kind == ActionKind::forward ? a.mb == cp.last_forward_mb : a.mb == cp.last_backward_mb;
  }
  // Outside ZeRO-3: the action's time, and what launching its reductions adds.
  double time(int r, const Action& a) const {
    const ChunkPlan& cp = chunk(r, a);
    const int k = a.kind == ActionKind::forward ? 0 : a.kind == ActionKind::backward_input ? 2
                  : a.kind == ActionKind::backward_weight ? 3 : 1;
    return cp.time[k] + (launches(r, a) ? cp.launch[k] : 0.0);
  }
};

// ZeRO-3's clocks per rank: its own compute clock, and when its data-parallel channel is free.
struct Zero3Clocks {
  std::vector<double> own_clock, channel_free;
  explicit Zero3Clocks(int p) : own_clock(size_t(p), 0.0), channel_free(size_t(p), 0.0) {}
};

// Every rank's action list run against the others': computes at the plans' prices, activations
// and their gradients sent to the neighbours, each rank starting once its gradients are zeroed.
const Simulation& simulate_pipeline(const StepContext& s, const std::vector<std::vector<Action>>& actions,
                                    const Passes& passes, Zero3Clocks& z3) {
  const Layout& l = s.l;
  SimCosts costs;
  costs.timing_only = true;  // (the lists were proven where they were made)
  costs.compute = [&](int r, const Action& a) {
    if (s.policy.params)
      return zero3_time(passes.segments(r, a), passes.launches(r, a), l.zero3_prefetch, s.ov, z3.own_clock[size_t(r)],
                        z3.channel_free[size_t(r)]);
    return passes.time(r, a);
  };
  const double act_bytes =
      double(s.b) * s.w.seq_len / l.cp / (l.sequence_parallel ? l.tp : 1) * s.m.n_embd * l.bytes_per_value();
  costs.transfer = [&](int from, int to) { return s.cm.send(act_bytes, l.tp * std::abs(to - from)); };
  for (int r = 0; r < s.p; ++r)  // the gradients zeroed
    costs.start.push_back(s.slow * s.cm.gradient_pass(passes.plans[size_t(r)].local_params));
  return simulation(s.cm, l, actions, s.mbs, costs, s.place, !s.policy.params && s.ov >= 1);
}

// The simulation's computes per rank (in completion order), and when each rank's first forward
// ends (from the step's start).
struct RankComputes {
  std::vector<std::vector<const SimulatedCompute*>> of;
  std::vector<double> first_forward_end;
};

RankComputes computes_by_rank(const Simulation& sim, int p) {
  RankComputes rc{std::vector<std::vector<const SimulatedCompute*>>(size_t(p)), std::vector<double>(size_t(p), 0.0)};
  for (const SimulatedCompute& c : sim.computes) {
    rc.of[size_t(c.stage)].push_back(&c);
    double& f = rc.first_forward_end[size_t(c.stage)];
    if (c.kind == ActionKind::forward && (f == 0 || c.end < f)) f = c.end;
  }
  return rc;
}

// The ranks' idle share between the first forward's start and the last backward's end.
double bubble_share(const RankComputes& rc, int p) {
  double t0 = 1e300, t1 = -1e300, busy = 0;
  for (const std::vector<const SimulatedCompute*>& computes : rc.of)
    for (const SimulatedCompute* c : computes) {
      busy += c->end - c->start;
      if (c->kind == ActionKind::forward) t0 = std::min(t0, c->start);
      else t1 = std::max(t1, c->end);
    }
  return p > 1 && t1 > t0 ? 1.0 - busy / (p * (t1 - t0)) : 0.0;
}

// A rank's forward and backward of one microbatch, and how many unit passes add up to it.
struct RankWork {
  double per_mb = 0;
  size_t units = 0;
};

RankWork work_of(const RankPlan& rp) {
  RankWork k;
  for (const ChunkPlan& cp : rp.chunks) k.per_mb += cp.compute_s, k.units += cp.forward.size() + cp.backward.size();
  return k;
}

double busiest_compute(const std::vector<RankPlan>& plans, int mbs) {
  double compute = 0;
  for (const RankPlan& rp : plans) compute = std::max(compute, work_of(rp).per_mb * mbs);
  return compute;
}

// Rank r's data-parallel channel outside ZeRO-3: the reductions its computes launch, one after
// another from their launch.
double launched_reductions_end(const StepContext& s, int r, const RankComputes& rc, const Passes& passes) {
  double channel = 0;
  for (const SimulatedCompute* cp : rc.of[size_t(r)]) {
    const SimulatedCompute& c = *cp;
    Action a{c.kind, c.mb};
    a.chunk = c.chunk;
    if (s.policy.params || !passes.launches(r, a)) continue;  // (ZeRO-3's channel ran with the computes)
    double at = c.start;
    for (const Segment& g : passes.segments(r, a)) {
      at += g.compute + (1 - s.ov) * g.gather;
      for (double red : g.reductions) {
        at += (1 - s.ov) * red;
        channel = std::max(channel, at) + s.ov * red;
      }
    }
  }
  return channel;
}

// When rank r's data-parallel channel has done its gradient reductions.
double channel_end(const StepContext& s, int r, const Simulation& sim, const RankComputes& rc, const Passes& passes,
                   const Zero3Clocks& z3) {
  double channel = launched_reductions_end(s, r, rc, passes);
  if (s.policy.params) channel = sim.finish[size_t(r)] + z3.channel_free[size_t(r)] - z3.own_clock[size_t(r)];
  if (s.l.reduce_after_backward && !s.policy.grads) {  // every unit's reduction, one after another, after the passes
    channel = sim.finish[size_t(r)];
    for (const ChunkPlan& cp : passes.plans[size_t(r)].chunks)
      for (const std::vector<Segment>* segs : {&cp.forward, &cp.backward})
        for (const Segment& g : *segs)
          for (double red : g.reductions) channel += red;
  }
  return channel;
}

// When each rank's gradients are reduced over the replicas: its passes and its channel done. The
// data-parallel replicas meet once a step (the last gradient reductions): the slowest replica's lag
// is added, its step's compute varying by jitter / sqrt(the unit passes it adds up).
std::vector<double> gradients_reduced(const StepContext& s, const Simulation& sim, const RankComputes& rc,
                                      const Passes& passes, const Zero3Clocks& z3) {
  std::vector<double> ready(size_t(s.p), 0.0);
  for (int r = 0; r < s.p; ++r) {
    ready[size_t(r)] = std::max(sim.finish[size_t(r)], channel_end(s, r, sim, rc, passes, z3));
    const RankWork k = work_of(passes.plans[size_t(r)]);
    if (s.l.dp > 1 && k.units > 0)
      ready[size_t(r)] += CostModel::expected_max_normal(s.l.dp) * s.cm.jitter() /
                          std::sqrt(double(k.units * size_t(s.mbs))) * k.per_mb * s.mbs;
  }
  return ready;
}

// The gradients ranks share beyond their replicas: sequence parallelism's replicated tensors'
// partial gradients summed over tp; the embedding's and the LM head's wte summed between the first
// and the last stage.
void sum_shared_gradients(const StepContext& s, const std::vector<RankPlan>& plans, std::vector<double>& ready) {
  for (int r = 0; r < s.p; ++r) ready[size_t(r)] += s.cm.all_reduce(plans[size_t(r)].replicated_elems * 4, s.l.tp, 1);
  const int a0 = s.place.rank_of(0), z = s.place.rank_of(s.place.stages() - 1);
  if (a0 != z) {
    const double both = std::max(ready[size_t(a0)], ready[size_t(z)]) +
                        s.cm.all_reduce(plans[size_t(a0)].wte_elems * 4, 2, s.l.tp * std::abs(z - a0));
    ready[size_t(a0)] = ready[size_t(z)] = both;
  }
}

// The step's end: on each rank the gradient norm, then the optimizer on its shard (ZeRO-1/2: the
// updated parameters all-gathered after it); the loss and norm all-reduces wait for every rank's norm.
void finish_step(const StepContext& s, const std::vector<RankPlan>& plans, const std::vector<double>& ready,
                 const std::vector<double>& first_forward_end, ReplicaCollectives& dp, Detail& d) {
  std::vector<double> post(size_t(s.p), 0.0), own(size_t(s.p), 0.0);
  for (int r = 0; r < s.p; ++r) {
    const RankPlan& rp = plans[size_t(r)];
    post[size_t(r)] = ready[size_t(r)] + s.slow * s.cm.gradient_pass(rp.local_params);  // the norm
    double gather = s.policy.optimizer && !s.policy.params ? dp.bucketed(rp.gather_bytes, &CostModel::all_gather) : 0.0;
    // --overlap-param-gather: the gather runs beside the next step's passes until its first forward
    // ends (that forward needs the last bucket): only what outlasts it stays in the step.
    if (s.l.overlap_param_gather) gather = std::max(0.0, gather - first_forward_end[size_t(r)]);
    own[size_t(r)] = post[size_t(r)] + s.slow * s.cm.optimizer(rp.shard_params) + gather;
    if (rp.newton_schulz_flops > 0)  // (five kernels a step of each matrix: three products, two scalings)
      own[size_t(r)] += s.slow * s.cm.newton_schulz(rp.newton_schulz_flops, 5 * s.l.ns_steps * 4 * s.L / s.p, s.l.ns_dtype) +
                        2 * s.cm.all_gather(rp.matrix_exchange_bytes, s.replicas, s.dp_stride) +
                        s.cm.all_gather(rp.matrix_tp_bytes, s.l.tp, 1);
  }
  const double scalars = s.cm.all_reduce(16, s.replicas, s.dp_stride) + s.cm.all_reduce(8, s.l.tp, 1) +
                         s.cm.all_reduce(16, s.p, s.l.tp);
  const double last_post = *std::max_element(post.begin(), post.end());
  for (int r = 0; r < s.p; ++r) d.stage_end.push_back(std::max(own[size_t(r)], last_post + scalars));
  d.step = *std::max_element(d.stage_end.begin(), d.stage_end.end());
}

// One step of layout l, phase by phase as the header describes it.
Detail simulate_step(const CostModel& cm, const Layout& l, const Pipeline& pipe) {
  const StepContext s = step_context(cm, l, pipe);
  UnitPrices units(s);
  ReplicaCollectives dp(s);
  // Compute: every rank's chunks priced unit by unit, pass by pass (a unit's compute and
  // tensor-parallel collectives, ZeRO-3's gather of its parameters, the reductions it launches).
  std::vector<RankPlan> plans;
  for (int r = 0; r < s.p; ++r) plans.push_back(plan_rank(s, pipe.chunks_of(r), units, dp));
  // Pipeline: the schedule's action lists run against each other at those prices.
  const std::vector<std::vector<Action>>& actions = schedules_of(l.schedule, s.p, s.mbs, s.place.chunks, s.w);
  mark_last_passes(actions, plans);
  const Passes passes{s, plans};
  Zero3Clocks z3(s.p);
  const Simulation& sim = simulate_pipeline(s, actions, passes, z3);
  Detail d;
  if (sim.deadlock || !sim.problem.empty()) {
    d.problem = "schedule " + l.schedule + ": " + sim.problem;
    return d;
  }
  d.peak_in_flight = sim.peak_in_flight;
  const RankComputes computes = computes_by_rank(sim, s.p);
  // Bubble: the ranks' idle share while the pipeline runs; compute: the busiest rank's passes.
  d.bubble = bubble_share(computes, s.p);
  d.compute = busiest_compute(plans, s.mbs);
  // Communication: the gradient reductions over the replicas, then the gradients the ranks share.
  std::vector<double> ready = gradients_reduced(s, sim, computes, passes, z3);
  sum_shared_gradients(s, plans, ready);
  // Optimizer: the norm, the update and the step's closing all-reduces.
  finish_step(s, plans, ready, computes.first_forward_end, dp, d);
  return d;
}

}  // namespace

double flops_per_token(const Workload& w) {
  const ModelConfig& m = w.model;
  const double params = double(rank_layout(m, {{0, m.n_layer}}, 1).global().total());
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

StepPrediction predict_step(const CostModel& cm, const Layout& l, bool exposed_comm) {
  const Workload& w = cm.workload();
  StepPrediction out;
  out.layout = l;
  out.problem = check_layout(w, l);
  if (!out.problem.empty()) return out;
  const Pipeline pipe = pipeline_of(w, l);
  out.stage_layers = pipe.layers;
  Detail d;
  try {
    d = simulate_step(cm, l, pipe);
  } catch (const InputError& e) {  // a schedule that refuses this shape (its rule not in layout_problem)
    out.problem = e.what();
    return out;
  }
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
  out.stage_memory = predict_memory(w, l, d.peak_in_flight);
  if (exposed_comm) add_exposed_comm(cm, out);
  return out;
}

void add_exposed_comm(const CostModel& cm, StepPrediction& p) {
  if (!p.valid() || p.exposed_comm_known) return;
  CostModel free = cm;
  free.set_free_communication(true);
  const Detail f = simulate_step(free, p.layout, pipeline_of(cm.workload(), p.layout));
  p.exposed_comm_s = std::max(0.0, p.step_s - f.step);
  p.exposed_comm_known = true;
}

}  // namespace gpt2
