#include "perf/step_model.hpp"

#include "model/activation_sizes.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>

#include "core/error.hpp"
#include "model/param_layout.hpp"
#include "model/stage_layout.hpp"
#include "parallel/mixed_gather.hpp"
#include "parallel/stage_partition.hpp"
#include "perf/rank_pipeline.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule.hpp"
#include "parallel/zero.hpp"
#include "runtime/topology.hpp"

namespace gpt2 {

namespace {

// A chunk's part of one microbatch, unit by unit in the order the trainer runs them.
struct Segment {
  double compute = 0;   // the unit's work and its tensor-parallel collectives
  double gather = 0;    // ZeRO-3: its parameters all-gathered first
  // Gradient reductions launched when it ends (at most two: the embedding's wpe and wte).
  struct Reductions {
    double v[2] = {0, 0};
    int n = 0;
    Reductions() = default;
    Reductions(std::initializer_list<double> l) {
      for (double x : l) v[n++] = x;
    }
    void push_back(double x) { v[n++] = x; }
    const double* begin() const { return v; }
    const double* end() const { return v + n; }
  } reductions;
};

// Compute plus what ZeRO-3's gathers add: each unit's gather is issued while the unit before it
// computes; the part the hardware cannot overlap adds in full. (ZeRO-3's own timeline is
// zero3_time's.)
double run_time(const std::vector<Segment>& segs, double overlap) {
  double t = 0, gathers = 0, waits = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    t += segs[i].compute;
    gathers += segs[i].gather;
    waits += i == 0 ? segs[i].gather : std::max(0.0, segs[i].gather - segs[i - 1].compute);
  }
  return t + (1 - overlap) * gathers + overlap * waits;
}

// ZeRO-3: one pass over its units as the trainer runs them, with the rank's data-parallel channel
// (every gather and reduction, one after another in issue order: they share the links). The first
// unit's gather is issued as the pass starts, each next one when the unit before it starts (the
// prefetch); a unit starts once its parameters are in; its reductions are issued when it ends. The
// share of each the hardware cannot overlap (1 - overlap) stalls the compute that issues it.
// `clock` and `channel` (when the channel is free) advance on the rank's own compute clock, which
// counts no idle time: a pipeline rank's channel keeps its backlog through a wait (pessimistic there).
double zero3_time(const std::vector<Segment>& segs, bool reduce, double overlap, double& clock, double& channel) {
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
    if (i + 1 < segs.size()) next_in = gather(i + 1);
    t += segs[i].compute;
    if (reduce)
      for (double red : segs[i].reductions) {
        t += (1 - overlap) * red;
        channel = std::max(channel, t) + overlap * red;
      }
  }
  clock = t;
  return t - start;
}

struct ChunkPlan {
  // forward; a whole backward; its input pass B and weight pass W (split schedules)
  std::vector<Segment> forward, backward, input, weight;
  // The chunk's last forward and last backward or weight pass: where ZeRO 0/1 reduce the
  // gradients accumulated over the step.
  int last_forward_mb = -1, last_backward_mb = -1;
  double compute_s = 0;  // forward + backward of one microbatch
  // Per pass (forward, backward, input, weight), outside ZeRO-3: its time, and what launching its
  // reductions adds (their share the hardware cannot overlap).
  double time[4] = {0, 0, 0, 0}, launch[4] = {0, 0, 0, 0};
};

struct RankPlan {
  std::vector<ChunkPlan> chunks;
  double local_params = 0, shard_params = 0, replicated_elems = 0, wte_elems = 0;
  double gather_bytes = 0;  // ZeRO-1/2's all-gather of the updated parameters
};

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

Detail simulate_step(const CostModel& cm, const Layout& l, const Pipeline& pipe) {
  const Workload& w = cm.workload();
  const Hardware& hw = cm.hardware();
  const ModelConfig& m = w.model;
  const Placement& place = pipe.placement;
  const int p = l.pp, mbs = l.microbatches, b = int(w.batch / l.dp / mbs), L = m.n_layer;
  const ShardPolicy policy = zero_policy(l.zero);
  const double ov = hw.comm_overlap;
  const double slow = cm.node_slowdown(l);  // compute of a rank whose node is busy
  // Stragglers: a blocking collective waits for the slowest of its ranks. With a unit's time
  // varying by jitter (relative standard deviation), the tensor-parallel ranks' collectives between
  // the pieces of every unit add about E[max of tp normals] x jitter to its compute.
  const double tp_wait = 1 + CostModel::expected_max_normal(l.tp) * cm.jitter();
  // Every block costs the same (and the GEMM shape model is not free): each unit kind's times and
  // tensor-parallel collectives are priced once.
  auto kind_of = [&](int u) { return u == 0 ? 0 : u == L + 1 ? 2 : 1; };
  UnitTime unit_memo[3];
  double tp_fwd_memo[3], tp_bwd_memo[3];
  bool priced[3] = {false, false, false};
  auto price = [&](int u) {
    const int k = kind_of(u);
    if (!priced[k]) {
      UnitTime t = cm.unit_time(u, b, l);
      const double f = slow * tp_wait;
      t.forward *= f, t.backward_input *= f, t.backward_weight *= f;
      unit_memo[k] = t, tp_fwd_memo[k] = cm.tp_forward(u, b, l), tp_bwd_memo[k] = cm.tp_backward(u, b, l);
      priced[k] = true;
    }
    return k;
  };
  auto unit = [&](int u) { return unit_memo[price(u)]; };
  auto tp_forward = [&](int u) { return tp_fwd_memo[price(u)]; };
  auto tp_backward = [&](int u) { return tp_bwd_memo[price(u)]; };
  const double cp_fwd = cm.cp_forward(b, l), cp_bwd = cm.cp_backward(b, l);
  const double grad_bytes = l.grad_reduce_dtype == "bf16" ? 2.0 : 4.0;  // parallel.grad_reduce_dtype
  const double bucket = (l.bucket_mb > 0 ? l.bucket_mb : ov < 0.5 ? 1.0 : 25.0) * 1048576.0;
  // The parameters' replicas: dp x cp ranks (the cp ranks tp apart; the dp ranks a whole replica's
  // pipeline apart, which decides the links when there are several).
  const int replicas = l.dp * l.cp, dp_stride = l.dp > 1 ? l.tp * l.pp * l.cp : l.tp;
  // A unit's collective over the replicas, one per bucket (ShardLayout cuts every unit into buckets).
  // (Remembered for the last size asked: every block asks for the same.)
  struct Last {
    double bytes = -1, seconds = 0;
    double (CostModel::*op)(double, int, int) const = nullptr;
  } last;
  auto bucketed = [&](double bytes, double (CostModel::*op)(double, int, int) const) {
    if (replicas <= 1) return 0.0;
    if (bytes == last.bytes && op == last.op) return last.seconds;
    const double buckets = std::max(1.0, std::ceil(bytes / bucket));
    last = {bytes, (cm.*op)(bytes, replicas, dp_stride) + (buckets - 1) * (cm.*op)(0, replicas, dp_stride), op};
    return last.seconds;
  };
  // Its gradient reduction (all-reduce, or reduce-scatter when the optimizer state is sharded) ...
  auto reduce = [&](double elems) {
    return bucketed(elems * grad_bytes, policy.optimizer ? &CostModel::reduce_scatter : &CostModel::all_reduce);
  };
  // ... and ZeRO-3's gather of its parameters before each use (bytes). Under mixed precision a
  // block's matrices and the LM head's tied wte travel as 16-bit values, the rest in fp32
  // (parallel/mixed_gather); gather_value_bytes() is a unit's bytes a value.
  auto gather = [&](double bytes) { return policy.params ? bucketed(bytes, &CostModel::all_gather) : 0.0; };
  auto gather_value_bytes = [&](UnitKind k) {
    return gathered_in_16_bits(k) && l.param_gather_dtype != "fp32" ? l.bytes_per_value() : 4.0;
  };

  std::vector<RankPlan> plans(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    const std::vector<BlockRange> chunks = pipe.chunks_of(r);
    const StageLayout& sl = rank_layout(m, chunks, l.tp);
    RankPlan& rp = plans[size_t(r)];
    auto unit_elems = [&](UnitKind k, int layer = -1) {
      const int u = sl.unit_index(k, layer);
      return u < 0 ? 0.0 : double(sl.units()[size_t(u)].range.size());
    };
    rp.local_params = double(sl.local_size());
    rp.shard_params = policy.optimizer ? rp.local_params / replicas : rp.local_params;
    rp.wte_elems = sl.has_embedding() ? unit_elems(UnitKind::wte) : unit_elems(UnitKind::tied_wte);
    if (policy.optimizer) rp.wte_elems /= replicas;
    for (const TensorInfo& t : sl.tensors())
      if (t.replicated && l.tp > 1) rp.replicated_elems += double(t.range.size());
    for (const Unit& u : sl.units()) rp.gather_bytes += gather_value_bytes(u.kind) * double(u.range.size());
    Recompute recompute = Recompute::none;
    parse_recompute(l.recompute, recompute);
    // Attention (scores, softmax, their product with v) in a block's forward FLOPs: 2TC of 24C^2 + 2TC
    // a token (causal: half of the T x T scores).
    const double C = w.model.n_embd, Tq = w.seq_len;
    const double attention_share = 2 * Tq * C / (24 * C * C + 2 * Tq * C);
    // full under a split backward: the input pass recomputes q, k, v (6C^2), attention and fc (8C^2).
    const double split_share = (14 * C * C + 2 * Tq * C) / (24 * C * C + 2 * Tq * C);
    for (const BlockRange& c : chunks) {
      ChunkPlan cp;
      const size_t units = size_t(c.end - c.first) + 2;
      cp.forward.reserve(units), cp.backward.reserve(units), cp.input.reserve(units), cp.weight.reserve(units);
      const bool emb = c.first == 0, head = c.end == L;
      const double data = emb || head ? slow * cm.data(b) : 0.0;
      if (emb) {
        const UnitTime t = unit(0);
        cp.forward.push_back({data + t.forward + tp_forward(0),
                              gather(4 * (unit_elems(UnitKind::wte) + unit_elems(UnitKind::wpe))), {}});
      }
      for (int layer = c.first; layer < c.end; ++layer) {
        const UnitTime t = unit(1 + layer);
        cp.forward.push_back({t.forward + tp_forward(1 + layer) + cp_fwd,
                              gather(gather_value_bytes(UnitKind::block) * unit_elems(UnitKind::block, layer)), {}});
      }
      if (head) {
        const UnitTime t = unit(L + 1);
        const int wu = sl.head_wte_unit();
        const double head_wte = double(sl.units()[size_t(wu)].range.size()), norm = unit_elems(UnitKind::final_norm);
        Segment seg{(emb ? 0.0 : data) + t.forward + tp_forward(L + 1),
                    gather(4 * norm + gather_value_bytes(sl.units()[size_t(wu)].kind) * head_wte), {}};
        // The LM head's copy of wte (another rank has the embedding) has its whole gradient after
        // the head's forward.
        if (sl.units()[size_t(wu)].grads_final_in_forward()) seg.reductions.push_back(reduce(head_wte));
        cp.forward.push_back(seg);
        const double tp_b = tp_backward(L + 1);
        cp.backward.push_back({t.backward() + tp_b, gather(4 * norm), {reduce(norm)}});
        cp.input.push_back({t.backward_input + tp_b, gather(4 * norm), {}});
        cp.weight.push_back({t.backward_weight, 0, {reduce(norm)}});
      }
      for (int layer = c.end - 1; layer >= c.first; --layer) {
        const UnitTime t = unit(1 + layer);
        const double e = unit_elems(UnitKind::block, layer), tp_b = tp_backward(1 + layer) + cp_bwd;
        // Recomputation (model/activation_sizes): full re-runs the block's forward before the
        // backward, or q, k, v, attention and fc before a split one's input pass; selective re-runs
        // attention before the backward or its input pass (their shares of the forward's FLOPs).
        double again = 0, again_split = 0;
        if (is_recomputed(recompute, l.recompute_every, layer)) {
          const double fwd = t.forward + tp_forward(1 + layer) + cp_fwd;
          again = recompute == Recompute::full ? fwd : fwd * attention_share;
          again_split = recompute == Recompute::full ? fwd * split_share : again;
        }
        cp.backward.push_back({again + t.backward() + tp_b, gather(gather_value_bytes(UnitKind::block) * e), {reduce(e)}});
        cp.input.push_back({again_split + t.backward_input + tp_b, gather(gather_value_bytes(UnitKind::block) * e), {}});  // B: the collectives, the params
        cp.weight.push_back({t.backward_weight, 0, {reduce(e)}});                    // W: completes the gradient
      }
      if (emb) {  // only weights: all of it in W
        const UnitTime t = unit(0);
        const Segment seg{t.backward() + tp_backward(0), 0,
                          {reduce(unit_elems(UnitKind::wpe)), reduce(unit_elems(UnitKind::wte))}};
        cp.backward.push_back(seg);
        cp.weight.push_back(seg);
      }
      for (const Segment& g : cp.forward) cp.compute_s += g.compute;
      for (const Segment& g : cp.backward) cp.compute_s += g.compute;
      const std::vector<Segment>* passes[4] = {&cp.forward, &cp.backward, &cp.input, &cp.weight};
      for (int k = 0; k < 4; ++k) {
        cp.time[k] = run_time(*passes[k], ov);
        for (const Segment& g : *passes[k])
          for (double red : g.reductions) cp.launch[k] += (1 - ov) * red;
      }
      rp.chunks.push_back(std::move(cp));
    }
  }

  const std::vector<std::vector<Action>>& actions = schedules_of(l.schedule, p, mbs, place.chunks, w);
  for (int r = 0; r < p; ++r) {
    for (const Action& a : actions[size_t(r)]) {
      ChunkPlan& cp = plans[size_t(r)].chunks[size_t(a.chunk)];
      if (a.kind == ActionKind::forward) cp.last_forward_mb = a.mb;
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight) cp.last_backward_mb = a.mb;
    }
  }
  auto segments = [&](int r, const Action& a) -> const std::vector<Segment>& {
    const ChunkPlan& cp = plans[size_t(r)].chunks[size_t(a.chunk)];
    switch (a.kind) {
      case ActionKind::forward: return cp.forward;
      case ActionKind::backward_input: return cp.input;
      case ActionKind::backward_weight: return cp.weight;
      default: return cp.backward;
    }
  };
  // Does this compute action launch its segments' reductions? ZeRO 0/1 reduce the accumulated
  // gradient once, after the step's last microbatch; 2/3 each microbatch's.
  auto launches = [&](int r, const Action& a) {
    const ChunkPlan& cp = plans[size_t(r)].chunks[size_t(a.chunk)];
    if (policy.grads) return true;
    if (l.reduce_after_backward) return false;  // all of them once the rank's passes are done
    return a.kind == ActionKind::forward ? a.mb == cp.last_forward_mb : a.mb == cp.last_backward_mb;
  };
  SimCosts costs;
  costs.timing_only = true;  // (the lists were proven where they were made)
  std::vector<double> own_clock(size_t(p), 0.0), channel_free(size_t(p), 0.0);  // ZeRO-3's, per rank
  costs.compute = [&](int r, const Action& a) {
    if (policy.params)
      return zero3_time(segments(r, a), launches(r, a), ov, own_clock[size_t(r)], channel_free[size_t(r)]);
    const ChunkPlan& cp = plans[size_t(r)].chunks[size_t(a.chunk)];
    const int k = a.kind == ActionKind::forward ? 0 : a.kind == ActionKind::backward_input ? 2
                  : a.kind == ActionKind::backward_weight ? 3 : 1;
    return cp.time[k] + (launches(r, a) ? cp.launch[k] : 0.0);
  };
  const double act_bytes =
      double(b) * w.seq_len / l.cp / (l.sequence_parallel ? l.tp : 1) * m.n_embd * l.bytes_per_value();
  costs.transfer = [&](int from, int to) { return cm.send(act_bytes, l.tp * std::abs(to - from)); };
  for (int r = 0; r < p; ++r) costs.start.push_back(slow * cm.gradient_pass(plans[size_t(r)].local_params));  // zeroing
  const Simulation& sim = simulation(cm, l, actions, mbs, costs, place, !policy.params && ov >= 1);

  Detail d;
  if (sim.deadlock || !sim.problem.empty()) {
    d.problem = "schedule " + l.schedule + ": " + sim.problem;
    return d;
  }
  d.peak_in_flight = sim.peak_in_flight;
  // The data-parallel channel of each rank: reductions one after another, from their launch.
  std::vector<double> ready(size_t(p), 0.0);
  double t0 = 1e300, t1 = -1e300, busy = 0;
  std::vector<std::vector<const SimulatedCompute*>> by_rank(static_cast<size_t>(p));
  std::vector<double> first_forward_end(size_t(p), 0.0);  // from the step's start
  for (const SimulatedCompute& c : sim.computes) {
    by_rank[size_t(c.stage)].push_back(&c);
    double& f = first_forward_end[size_t(c.stage)];
    if (c.kind == ActionKind::forward && (f == 0 || c.end < f)) f = c.end;
  }
  for (int r = 0; r < p; ++r) {
    double channel = 0;
    for (const SimulatedCompute* cp : by_rank[size_t(r)]) {
      const SimulatedCompute& c = *cp;
      busy += c.end - c.start;
      if (c.kind == ActionKind::forward) t0 = std::min(t0, c.start);
      else t1 = std::max(t1, c.end);
      Action a{c.kind, c.mb};
      a.chunk = c.chunk;
      if (policy.params || !launches(r, a)) continue;  // (ZeRO-3's channel ran with the computes)
      double at = c.start;
      for (const Segment& g : segments(r, a)) {
        at += g.compute + (1 - ov) * g.gather;
        for (double red : g.reductions) {
          at += (1 - ov) * red;
          channel = std::max(channel, at) + ov * red;
        }
      }
    }
    if (policy.params) channel = sim.finish[size_t(r)] + channel_free[size_t(r)] - own_clock[size_t(r)];
    if (l.reduce_after_backward && !policy.grads) {  // every unit's reduction, one after another, after the passes
      channel = sim.finish[size_t(r)];
      for (const ChunkPlan& cp : plans[size_t(r)].chunks)
        for (const std::vector<Segment>* segs : {&cp.forward, &cp.backward})
          for (const Segment& g : *segs)
            for (double red : g.reductions) channel += red;
    }
    ready[size_t(r)] = std::max(sim.finish[size_t(r)], channel);
    double per_mb = 0;
    size_t units = 0;
    for (const ChunkPlan& cp : plans[size_t(r)].chunks) per_mb += cp.compute_s, units += cp.forward.size() + cp.backward.size();
    d.compute = std::max(d.compute, per_mb * mbs);
    // The data-parallel replicas meet once a step (the last gradient reductions): the slowest
    // replica's lag, its step's compute varying by jitter / sqrt(the unit passes it adds up).
    if (l.dp > 1 && units > 0)
      ready[size_t(r)] += CostModel::expected_max_normal(l.dp) * cm.jitter() / std::sqrt(double(units * size_t(mbs))) *
                          per_mb * mbs;
  }
  d.bubble = p > 1 && t1 > t0 ? 1.0 - busy / (p * (t1 - t0)) : 0.0;
  // Sequence parallelism: the replicated tensors' partial gradients summed over tp.
  for (int r = 0; r < p; ++r) ready[size_t(r)] += cm.all_reduce(plans[size_t(r)].replicated_elems * 4, l.tp, 1);
  const int a0 = place.rank_of(0), z = place.rank_of(place.stages() - 1);
  if (a0 != z) {  // the embedding's and the LM head's wte gradients summed
    const double both = std::max(ready[size_t(a0)], ready[size_t(z)]) +
                        cm.all_reduce(plans[size_t(a0)].wte_elems * 4, 2, l.tp * std::abs(z - a0));
    ready[size_t(a0)] = ready[size_t(z)] = both;
  }
  std::vector<double> post(size_t(p), 0.0), own(size_t(p), 0.0);
  for (int r = 0; r < p; ++r) {
    const RankPlan& rp = plans[size_t(r)];
    post[size_t(r)] = ready[size_t(r)] + slow * cm.gradient_pass(rp.local_params);  // the norm
    double gather = policy.optimizer && !policy.params ? bucketed(rp.gather_bytes, &CostModel::all_gather) : 0.0;
    // --overlap-param-gather: the gather runs beside the next step's passes until its first forward
    // ends (that forward needs the last bucket): only what outlasts it stays in the step.
    if (l.overlap_param_gather) gather = std::max(0.0, gather - first_forward_end[size_t(r)]);
    own[size_t(r)] = post[size_t(r)] + slow * cm.optimizer(rp.shard_params) + gather;
  }
  // The loss and norm all-reduces: every rank's contribution, then each rank's optimizer is done.
  const double scalars = cm.all_reduce(16, replicas, dp_stride) + cm.all_reduce(8, l.tp, 1) + cm.all_reduce(16, p, l.tp);
  const double last_post = *std::max_element(post.begin(), post.end());
  for (int r = 0; r < p; ++r) d.stage_end.push_back(std::max(own[size_t(r)], last_post + scalars));
  d.step = *std::max_element(d.stage_end.begin(), d.stage_end.end());
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
