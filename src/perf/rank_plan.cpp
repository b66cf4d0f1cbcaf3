#include "perf/rank_plan.hpp"

#include <algorithm>

#include "model/activation_sizes.hpp"
#include "plugins/optimizer.hpp"

namespace gpt2 {

namespace {

// Compute plus what ZeRO-3's gathers add: each unit's gather is issued while the unit before it
// computes; the part the hardware cannot overlap adds in full. (ZeRO-3's own timeline is
// step_model.cpp's zero3_time.)
double run_time(const std::vector<Segment>& segs, double overlap) {
  double t = 0, gathers = 0, waits = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    t += segs[i].compute;
    gathers += segs[i].gather;
    waits += i == 0 ? segs[i].gather : std::max(0.0, segs[i].gather - segs[i - 1].compute);
  }
  return t + (1 - overlap) * gathers + overlap * waits;
}

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
  pr.recompute = s.l.recompute;
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
                          pr.dp.gather(pr.dp.value_bytes(UnitKind::block) * pr.elems(UnitKind::block, layer), pr.dp.block_segments()), {}});
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
  const int n = pr.dp.block_segments();
  cp.backward.push_back({again.whole + t.backward() + tp_b, pr.dp.gather(params, n), {pr.dp.reduce(e, n)}});
  cp.input.push_back({again.split + t.backward_input + tp_b, pr.dp.gather(params, n), {}});
  cp.weight.push_back({t.backward_weight, 0, {pr.dp.reduce(e, n)}});
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

// Muon's matrices (parallel/matrix_shards): whole on the owners the replicas deal them to, tp slices
// gathered; the busiest owner's products and the parts' exchange.
void plan_matrices(const StepContext& s, const StageLayout& sl, RankPlan& rp) {
  std::vector<double> flops;
  double elems = 0;  // the rank's tp slices of the matrices
  for (const TensorInfo& t : sl.tensors()) {
    if (!block_matrix(t)) continue;
    const bool columns = t.kind == Param::attprojw || t.kind == Param::fcprojw;
    const double rows = double(t.shape[0]) * (columns ? 1 : s.l.tp), cols = double(t.shape[1]) * (columns ? s.l.tp : 1);
    flops.push_back(newton_schulz_flops(rows, cols, s.l.ns_steps));
    elems += double(t.range.size());
  }
  const int D = s.policy.optimizer ? s.replicas : 1;
  std::vector<double> load(size_t(D), 0.0);
  const std::vector<int> owner = deal_by_cost(flops, D);
  for (size_t i = 0; i < flops.size(); ++i) load[size_t(owner[i])] += flops[i];
  rp.newton_schulz_flops = *std::max_element(load.begin(), load.end());
  if (D > 1) rp.matrix_exchange_bytes = 4 * elems / D;
  if (s.l.tp > 1) rp.matrix_tp_bytes = 4 * elems / D * s.l.tp;
}

}  // namespace

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
  if (s.l.whole_matrices) plan_matrices(s, sl, rp);
  for (const Unit& u : sl.units()) rp.gather_bytes += dp.value_bytes(u.kind) * double(u.range.size());
  for (const BlockRange& c : chunks) rp.chunks.push_back(plan_chunk(pr, c));
  return rp;
}

}  // namespace gpt2
