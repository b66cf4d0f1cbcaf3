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

// What every price of one layout's step shares: the step's shape and the factors on its compute.
struct StepContext {
  const CostModel& cm;
  const Layout& l;
  const Workload& w;
  const ModelConfig& m;
  const Placement& place;
  int p, mbs, b, L;  // pipeline ranks, microbatches, a microbatch's sequences, blocks
  ShardPolicy policy;
  double ov;    // the share of communication the hardware overlaps with compute
  double slow;  // compute of a rank whose node is busy
  // The parameters' replicas: dp x cp ranks (the cp ranks tp apart; the dp ranks a whole replica's
  // pipeline apart, which decides the links when there are several).
  int replicas, dp_stride;
  double cp_fwd, cp_bwd;  // a block's exposed context-parallel shifts for one microbatch
};

StepContext step_context(const CostModel& cm, const Layout& l, const Pipeline& pipe) {
  const Workload& w = cm.workload();
  const int mbs = l.microbatches, b = int(w.batch / l.dp / mbs);
  return {cm, l, w, w.model, pipe.placement, l.pp, mbs, b, w.model.n_layer, zero_policy(l.zero),
          cm.hardware().comm_overlap, cm.node_slowdown(l), l.dp * l.cp, l.dp > 1 ? l.tp * l.pp * l.cp : l.tp,
          cm.cp_forward(b, l), cm.cp_backward(b, l)};
}

// Every block costs the same (and the GEMM shape model is not free): each unit kind's times and
// tensor-parallel collectives are priced once, for the first unit of the kind asked about.
class UnitPrices {
 public:
  // Stragglers: a blocking collective waits for the slowest of its ranks. With a unit's time varying
  // by jitter (relative standard deviation), the tensor-parallel ranks' collectives between the
  // pieces of every unit add about E[max of tp normals] x jitter to its compute.
  explicit UnitPrices(const StepContext& s)
      : s_(s), tp_wait_(1 + CostModel::expected_max_normal(s.l.tp) * s.cm.jitter()) {}
  UnitTime time(int u) { return time_[price(u)]; }
  double tp_forward(int u) { return tp_forward_[price(u)]; }
  double tp_backward(int u) { return tp_backward_[price(u)]; }

 private:
  int price(int u) {
    const int k = u == 0 ? 0 : u == s_.L + 1 ? 2 : 1;
    if (!priced_[k]) {
      UnitTime t = s_.cm.unit_time(u, s_.b, s_.l);
      const double f = s_.slow * tp_wait_;
      t.forward *= f, t.backward_input *= f, t.backward_weight *= f;
      time_[k] = t;
      tp_forward_[k] = s_.cm.tp_forward(u, s_.b, s_.l), tp_backward_[k] = s_.cm.tp_backward(u, s_.b, s_.l);
      priced_[k] = true;
    }
    return k;
  }
  const StepContext& s_;
  const double tp_wait_;
  UnitTime time_[3];
  double tp_forward_[3] = {0, 0, 0}, tp_backward_[3] = {0, 0, 0};
  bool priced_[3] = {false, false, false};
};

// A unit's collectives over the parameters' replicas, one per bucket (ShardLayout cuts every unit
// into buckets). (Remembered for the last size asked: every block asks for the same.)
class ReplicaCollectives {
 public:
  using Op = double (CostModel::*)(double, int, int) const;
  explicit ReplicaCollectives(const StepContext& s)
      : s_(s),
        grad_bytes_(s.l.grad_reduce_dtype == "bf16" ? 2.0 : 4.0),  // parallel.grad_reduce_dtype
        bucket_((s.l.bucket_mb > 0 ? s.l.bucket_mb : s.ov < 0.5 ? 1.0 : 25.0) * 1048576.0) {}
  double bucketed(double bytes, Op op) {
    if (s_.replicas <= 1) return 0.0;
    if (bytes == last_.bytes && op == last_.op) return last_.seconds;
    const double buckets = std::max(1.0, std::ceil(bytes / bucket_));
    const double first = (s_.cm.*op)(bytes, s_.replicas, s_.dp_stride);
    last_ = {bytes, first + (buckets - 1) * (s_.cm.*op)(0, s_.replicas, s_.dp_stride), op};
    return last_.seconds;
  }
  // Its gradient reduction (all-reduce, or reduce-scatter when the optimizer state is sharded) ...
  double reduce(double elems) {
    const bool scatter = s_.policy.optimizer && !s_.l.grad_all_reduce;
    return bucketed(elems * grad_bytes_, scatter ? &CostModel::reduce_scatter : &CostModel::all_reduce);
  }
  // ... and ZeRO-3's gather of its parameters before each use (bytes).
  double gather(double bytes) { return s_.policy.params ? bucketed(bytes, &CostModel::all_gather) : 0.0; }
  // A gathered unit's bytes a value: under mixed precision a block's matrices and the LM head's tied
  // wte travel as 16-bit values, the rest in fp32 (parallel/mixed_gather).
  double value_bytes(UnitKind k) const {
    return gathered_in_16_bits(k) && s_.l.param_gather_dtype != "fp32" ? s_.l.bytes_per_value() : 4.0;
  }

 private:
  struct Last {
    double bytes = -1, seconds = 0;
    Op op = nullptr;
  };
  const StepContext& s_;
  const double grad_bytes_, bucket_;
  Last last_;
};

// What pricing one rank's chunks needs: the step, the rank's stage layout, the price lists.
struct RankPricing {
  const StepContext& s;
  const StageLayout& sl;
  UnitPrices& units;
  ReplicaCollectives& dp;
  Recompute recompute = Recompute::none;
  // Attention (scores, softmax, their product with v) in a block's forward FLOPs: 2TC of 24C^2 + 2TC
  // a token (causal: half of the T x T scores).
  double attention_share = 0;
  // full under a split backward: the input pass recomputes q, k, v (6C^2), attention and fc (8C^2).
  double split_share = 0;
  double elems(UnitKind k, int layer = -1) const {
    const int u = sl.unit_index(k, layer);
    return u < 0 ? 0.0 : double(sl.units()[size_t(u)].range.size());
  }
};

RankPricing rank_pricing(const StepContext& s, const StageLayout& sl, UnitPrices& units, ReplicaCollectives& dp) {
  RankPricing pr{s, sl, units, dp};
  parse_recompute(s.l.recompute, pr.recompute);
  const double C = s.w.model.n_embd, Tq = s.w.seq_len;
  pr.attention_share = 2 * Tq * C / (24 * C * C + 2 * Tq * C);
  pr.split_share = (14 * C * C + 2 * Tq * C) / (24 * C * C + 2 * Tq * C);
  return pr;
}

// The LM head's forward (`data`: the microbatch's, where the chunk has no embedding to load it).
// The head's copy of wte (another rank has the embedding) has its whole gradient after it.
Segment head_forward(RankPricing& pr, double data) {
  const int L = pr.s.L;
  const UnitTime t = pr.units.time(L + 1);
  const Unit& wte = pr.sl.units()[size_t(pr.sl.head_wte_unit())];
  const double head_wte = double(wte.range.size()), norm = pr.elems(UnitKind::final_norm);
  Segment seg{data + t.forward + pr.units.tp_forward(L + 1),
              pr.dp.gather(4 * norm + pr.dp.value_bytes(wte.kind) * head_wte), {}};
  if (wte.grads_final_in_forward()) seg.reductions.push_back(pr.dp.reduce(head_wte));
  return seg;
}

// The chunk's forward: the embedding (with the microbatch's data), its blocks, the LM head.
void plan_forward(RankPricing& pr, const BlockRange& c, double data, ChunkPlan& cp) {
  const bool emb = c.first == 0;
  if (emb) {
    const UnitTime t = pr.units.time(0);
    cp.forward.push_back({data + t.forward + pr.units.tp_forward(0),
                          pr.dp.gather(4 * (pr.elems(UnitKind::wte) + pr.elems(UnitKind::wpe))), {}});
  }
  for (int layer = c.first; layer < c.end; ++layer) {
    const UnitTime t = pr.units.time(1 + layer);
    cp.forward.push_back({t.forward + pr.units.tp_forward(1 + layer) + pr.s.cp_fwd,
                          pr.dp.gather(pr.dp.value_bytes(UnitKind::block) * pr.elems(UnitKind::block, layer)), {}});
  }
  if (c.end == pr.s.L) cp.forward.push_back(head_forward(pr, emb ? 0.0 : data));
}

// The LM head's backward, whole or as its input pass B and weight pass W.
void plan_head_backward(RankPricing& pr, ChunkPlan& cp) {
  const int L = pr.s.L;
  const UnitTime t = pr.units.time(L + 1);
  const double norm = pr.elems(UnitKind::final_norm), tp_b = pr.units.tp_backward(L + 1);
  cp.backward.push_back({t.backward() + tp_b, pr.dp.gather(4 * norm), {pr.dp.reduce(norm)}});
  cp.input.push_back({t.backward_input + tp_b, pr.dp.gather(4 * norm), {}});
  cp.weight.push_back({t.backward_weight, 0, {pr.dp.reduce(norm)}});
}

// What recomputation adds before a block's whole backward and before its input pass
// (model/activation_sizes): full re-runs the block's forward before the backward, or q, k, v,
// attention and fc before a split one's input pass; selective re-runs attention before the backward
// or its input pass (their shares of the forward's FLOPs).
struct Recomputed {
  double whole = 0, split = 0;
};

Recomputed recomputed(RankPricing& pr, int layer, const UnitTime& t) {
  Recomputed again;
  if (is_recomputed(pr.recompute, pr.s.l.recompute_every, layer)) {
    const double fwd = t.forward + pr.units.tp_forward(1 + layer) + pr.s.cp_fwd;
    again.whole = pr.recompute == Recompute::full ? fwd : fwd * pr.attention_share;
    again.split = pr.recompute == Recompute::full ? fwd * pr.split_share : again.whole;
  }
  return again;
}

// A block's backward, whole or as B (the collectives, the parameters) and W (completes the gradient).
void plan_block_backward(RankPricing& pr, int layer, ChunkPlan& cp) {
  const UnitTime t = pr.units.time(1 + layer);
  const double e = pr.elems(UnitKind::block, layer), tp_b = pr.units.tp_backward(1 + layer) + pr.s.cp_bwd;
  const Recomputed again = recomputed(pr, layer, t);
  const double params = pr.dp.value_bytes(UnitKind::block) * e;
  cp.backward.push_back({again.whole + t.backward() + tp_b, pr.dp.gather(params), {pr.dp.reduce(e)}});
  cp.input.push_back({again.split + t.backward_input + tp_b, pr.dp.gather(params), {}});
  cp.weight.push_back({t.backward_weight, 0, {pr.dp.reduce(e)}});
}

// The embedding's backward: only weights, all of it in W.
void plan_embedding_backward(RankPricing& pr, ChunkPlan& cp) {
  const UnitTime t = pr.units.time(0);
  const Segment seg{t.backward() + pr.units.tp_backward(0), 0,
                    {pr.dp.reduce(pr.elems(UnitKind::wpe)), pr.dp.reduce(pr.elems(UnitKind::wte))}};
  cp.backward.push_back(seg);
  cp.weight.push_back(seg);
}

// A microbatch's forward + backward; per pass its time and what launching its reductions adds.
void total_passes(ChunkPlan& cp, double ov) {
  for (const Segment& g : cp.forward) cp.compute_s += g.compute;
  for (const Segment& g : cp.backward) cp.compute_s += g.compute;
  const std::vector<Segment>* passes[4] = {&cp.forward, &cp.backward, &cp.input, &cp.weight};
  for (int k = 0; k < 4; ++k) {
    cp.time[k] = run_time(*passes[k], ov);
    for (const Segment& g : *passes[k])
      for (double red : g.reductions) cp.launch[k] += (1 - ov) * red;
  }
}

// A chunk's passes, unit by unit in the order the trainer runs them.
ChunkPlan plan_chunk(RankPricing& pr, const BlockRange& c) {
  const StepContext& s = pr.s;
  ChunkPlan cp;
  const size_t units = size_t(c.end - c.first) + 2;
  cp.forward.reserve(units), cp.backward.reserve(units), cp.input.reserve(units), cp.weight.reserve(units);
  const bool emb = c.first == 0, head = c.end == s.L;
  const double data = emb || head ? s.slow * s.cm.data(s.b) : 0.0;
  plan_forward(pr, c, data, cp);
  if (head) plan_head_backward(pr, cp);
  for (int layer = c.end - 1; layer >= c.first; --layer) plan_block_backward(pr, layer, cp);
  if (emb) plan_embedding_backward(pr, cp);
  total_passes(cp, s.ov);
  return cp;
}

// A rank's chunks, and the sizes its step's end needs: its parameters and their optimizer shard,
// the tensors sequence parallelism replicates, the tied wte, ZeRO-1/2's parameter gather.
RankPlan plan_rank(const StepContext& s, const std::vector<BlockRange>& chunks, UnitPrices& units,
                   ReplicaCollectives& dp) {
  const StageLayout& sl = rank_layout(s.m, chunks, s.l.tp);
  RankPricing pr = rank_pricing(s, sl, units, dp);
  RankPlan rp;
  rp.local_params = double(sl.local_size());
  rp.shard_params = s.policy.optimizer ? rp.local_params / s.replicas : rp.local_params;
  rp.wte_elems = sl.has_embedding() ? pr.elems(UnitKind::wte) : pr.elems(UnitKind::tied_wte);
  if (s.policy.optimizer) rp.wte_elems /= s.replicas;
  for (const TensorInfo& t : sl.tensors())
    if (t.replicated && s.l.tp > 1) rp.replicated_elems += double(t.range.size());
  for (const Unit& u : sl.units()) rp.gather_bytes += dp.value_bytes(u.kind) * double(u.range.size());
  for (const BlockRange& c : chunks) rp.chunks.push_back(plan_chunk(pr, c));
  return rp;
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
