#pragma once
// One rank's passes priced unit by unit, as the trainer runs them: the step model's (step_model.cpp)
// inputs to the pipeline simulation. What the pricing shares with the step's end (the step's shape,
// the unit prices, the data-parallel collectives) is here too.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "model/stage_layout.hpp"
#include "parallel/mixed_gather.hpp"
#include "parallel/zero.hpp"
#include "perf/cost_model.hpp"
#include "perf/rank_pipeline.hpp"
#include "perf/step_model.hpp"

namespace gpt2 {

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
  // Muon: the block matrices' orthogonalisation on the busiest owner of the rank's replica group,
  // every step; the exchange of their parts with the owners (as one all-gather of this size over the
  // replicas, each way) and the owners' all-gather of their slices over tp (its whole size).
  double newton_schulz_flops = 0, matrix_exchange_bytes = 0, matrix_tp_bytes = 0;
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

// A unit's collectives over the parameters' replicas, one per bucket (ShardLayout cuts every segment
// of a unit into buckets: a sharded block has a few). (Remembered for the last size asked: every
// block asks for the same.)
class ReplicaCollectives {
 public:
  using Op = double (CostModel::*)(double, int, int) const;
  explicit ReplicaCollectives(const StepContext& s)
      : s_(s),
        grad_bytes_(s.l.grad_reduce_dtype == ValueType::bf16 ? 2.0 : 4.0),  // parallel.grad_reduce_dtype
        bucket_((s.l.bucket_mb > 0 ? s.l.bucket_mb : s.ov < 0.5 ? 1.0 : 25.0) * 1048576.0),
        block_segments_(s.policy.optimizer && s.replicas > 1 ? gpt2::block_segments(s.m, s.l.tp, size_t(s.replicas)) : 1) {}
  // `bytes` in the buckets of `segments` segments.
  double bucketed(double bytes, Op op, int segments = 1) {
    if (s_.replicas <= 1) return 0.0;
    if (bytes == last_.bytes && op == last_.op && segments == last_.segments) return last_.seconds;
    const double buckets = std::max(1.0, std::ceil(bytes / bucket_)) + segments - 1;
    const double first = (s_.cm.*op)(bytes, s_.replicas, s_.dp_stride);
    last_ = {bytes, first + (buckets - 1) * (s_.cm.*op)(0, s_.replicas, s_.dp_stride), op, segments};
    return last_.seconds;
  }
  int block_segments() const { return block_segments_; }  // a block's (ZeRO's layout)
  // Its gradient reduction (all-reduce, or reduce-scatter when the optimizer state is sharded) ...
  double reduce(double elems, int segments = 1) {
    const bool scatter = s_.policy.optimizer && !s_.l.grad_all_reduce;
    return bucketed(elems * grad_bytes_, scatter ? &CostModel::reduce_scatter : &CostModel::all_reduce, segments);
  }
  // ... and ZeRO-3's gather of its parameters before each use (bytes).
  double gather(double bytes, int segments = 1) {
    return s_.policy.params ? bucketed(bytes, &CostModel::all_gather, segments) : 0.0;
  }
  // A gathered unit's bytes a value: under mixed precision a block's matrices and the LM head's tied
  // wte travel as 16-bit values, the rest in fp32 (parallel/mixed_gather).
  double value_bytes(UnitKind k) const {
    return gathered_in_16_bits(k) && s_.l.param_gather_dtype != GatherType::fp32 ? s_.l.bytes_per_value() : 4.0;
  }

 private:
  struct Last {
    double bytes = -1, seconds = 0;
    Op op = nullptr;
    int segments = 1;
  };
  const StepContext& s_;
  const double grad_bytes_, bucket_;
  const int block_segments_;
  Last last_;
};

// A rank's chunks priced, and the sizes its step's end needs.
RankPlan plan_rank(const StepContext& s, const std::vector<BlockRange>& chunks, UnitPrices& units,
                   ReplicaCollectives& dp);

}  // namespace gpt2
