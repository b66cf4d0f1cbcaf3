#pragma once
// A rank's parameters, gradients and optimizer state under any ZeRO level (parallel/zero.hpp),
// served to its Stage one unit at a time (model/unit_store.hpp). What lives where:
//                 parameters               gradients                      optimizer state
//   ZeRO-0        whole (local layout)     whole, all-reduced             whole
//   ZeRO-1        whole + shard (master)   whole, reduce-scattered        shard
//   ZeRO-2        whole + shard (master)   per-unit workspace -> shard    shard
//   ZeRO-3        shard; a unit gathered   per-unit workspace -> shard    shard
//                 for each use, then freed
// The shard (ShardLayout: this rank's piece of every bucket) is where clipping, weight decay and the
// update happen; ZeRO-1/2 all-gather the updated shards into the whole parameters (under mixed
// precision a block's matrices into the whole 16-bit working copy only: the shard keeps the masters). Workspaces are
// pooled and recycled as soon as their reduction completes: at rest (between steps) only the
// table's buffers exist. The parameters' and the gradients' columns are strategies of their own
// (parallel/param_source.hpp, parallel/grad_sink.hpp), picked once from the level; the store keeps
// the shard, the optimizer, the norm and what the strategies share (parallel/store_parts.hpp).
#include <memory>
#include <string>
#include <vector>

#include "model/unit_store.hpp"
#include "parallel/grad_norm.hpp"
#include "parallel/grad_sink.hpp"
#include "parallel/gradient_reducer.hpp"
#include "parallel/param_source.hpp"
#include "parallel/replicated_grads.hpp"
#include "parallel/shard_layout.hpp"
#include "parallel/working_copies.hpp"
#include "plugins/optimizer.hpp"
#include "parallel/zero.hpp"
#include "tensor/reduce.hpp"
#include "tensor/working_copy.hpp"

namespace gpt2 {

struct MemoryUse {
  size_t params = 0, grads = 0, optimizer = 0;  // bytes at rest
};

class ParamStore final : public UnitStore<float> {
 public:
  // grad_wire: the data-parallel gradient reduction's type on the wire (f32, or bf16).
  // working: the run's precision. Under bf16 / fp16 the GEMMs read a 16-bit working copy of the
  // weights: of the whole parameters where the store keeps them whole (ZeRO 0-2), of a gathered
  // unit's under ZeRO-3. With sharding the optimizer writes the shard's copy, and the parameter
  // all-gather moves the matrices as 16-bit values (parallel/mixed_gather.hpp); gather16 = false
  // gathers fp32 as at fp32 and rounds after (ZeRO-3: per GEMM), the same values (tests compare).
  // tp: the tensor-parallel group, for an optimizer that needs whole matrices (null: tp = 1).
  ParamStore(const StageLayout& layout, Communicator& dp, ShardPolicy policy, size_t bucket_elems,
             const std::string& optimizer, const OptimizerConfig& oc, Tracer& tracer, DType grad_wire = DType::f32,
             Precision working = Precision::fp32, bool gather16 = true, Communicator* tp = nullptr);
  ~ParamStore() override;

  // ---- UnitStore ----
  const float* params(int u) override;
  void release_params(int u) override;
  const uint16_t* low_params(int u) override;
  void prefetch_params(int u) override;
  float* grads(int u) override;
  bool first_write(int u, const float* at, size_t n, bool store) override {
    return grads_->first_write(u, at, n, store);
  }
  void wrote(int u, const float* at, size_t n) override { grads_->wrote(u, at, n); }
  void grads_done(int u, bool in_forward) override;

  const StageLayout& layout() const { return layout_; }
  const ShardLayout& shards() const { return shards_; }
  const ShardPolicy& policy() const { return policy_; }
  Optimizer& optimizer() { return *opt_; }
  const GradientReducer& reducer() const { return reducer_; }

  // ---- the step ----
  void init(uint64_t seed);                    // only what this rank keeps (values by position)
  void begin_step(int step, int microbatches);  // zero the gradients
  void finish_gradients();                      // every reduction launched and complete
  void sync_tied(Communicator& tied);           // sum the two wte gradients of a pipeline's ends
  // Sequence parallelism: the replicated tensors' gradients (LayerNorms, biases, wpe) are partial
  // sums over the tp ranks' rows; add them up.
  void sync_replicated(Communicator& tp);
  // This rank's part of the squared gradient norm: the tied copy left out, and the tensors replicated
  // over tp counted by tp rank 0 only. The parts add up over the data-parallel ranks when the
  // gradient is sharded, and over the tp ranks.
  // Each unit's part is taken when its reduction completes; the rest, and the total, here.
  void grad_sum_of_squares(DeviceScalar out);
  bool grads_sharded() const { return policy_.optimizer; }
  void optimizer_step(double lr, GradScale scale);  // and, ZeRO-1/2, the parameter all-gather

  // ---- whole-state views (checkpoints, tests; collective over dp when sharded) ----
  std::vector<std::string> sections() const;  // "params", then "opt.<name>" per optimizer buffer
  std::vector<float> local_values(const std::string& section);  // local layout, on the host
  void set_local_values(const std::string& section, const std::vector<float>& values);
  // What this rank itself holds of a section, without gathering (an HDF5 checkpoint writes it):
  // ranges of the local layout and where their values lie in what it holds. Sharded state: the
  // shard plan's rows of each tensor (ShardLayout::optimizer_shards), their values at the tensor's
  // run of the shard (the padding between runs is no tensor's); whole state: all of it (every dp
  // rank holds the same: one of them writes it).
  struct Owned {
    std::vector<Range> ranges;  // local layout
    std::vector<size_t> at;     // per range: its first value's index in what is held (ascending)
    std::vector<float> values;  // empty from owned_ranges
    bool sharded = false;
    size_t size() const;  // values held, up to the last range's end
  };
  Owned owned_ranges(const std::string& section) const;
  // Values [begin, begin + n) of what the rank holds of a section, to host memory (a bounded buffer).
  void copy_owned(const std::string& section, size_t begin, size_t n, float* dst);
  // Ranges and values, into `into` (its memory reused: a second checkpoint touches no new pages).
  void owned_values(const std::string& section, Owned& into);

  MemoryUse memory() const;
  // Bytes one all-gather of the whole parameters delivers to a rank (ZeRO 1-3; 0 without sharding).
  size_t gather_bytes() const;
  size_t peak_workspace_bytes() const { return workspaces_.bytes(); }

 private:
  struct StepState {
    int step = 0;
    bool grads_zeroed = false;  // the last update left the accumulating gradients 0
  };

  // The parameters exist complete only in the shard (ZeRO-3; ZeRO-1/2 gathering 16-bit matrices).
  bool params_sharded() const { return params_->only_in_shard(); }
  Vec<float> shard_vec(const Buffer<float>& b) const { return parts_.shard_vec(b); }
  Buffer<float> gather_whole(const float* shard);  // every bucket's pieces -> the local layout
  Vec<float> state_buffer(const std::string& section);
  const Unit& unit(int u) const { return parts_.unit(u); }

  StageLayout layout_;
  ShardPolicy policy_;
  ShardLayout shards_;
  GradientReducer reducer_;
  std::unique_ptr<MatrixShards> matrices_;  // whole matrices for the optimizer, where it needs them
  std::unique_ptr<Optimizer> opt_;
  ShardBuffers shard_;
  WorkingCopies copies_;  // the 16-bit working copies (mixed precision)
  GradNorm norm_;
  ReplicatedGrads replicated_;
  Workspaces workspaces_;
  StepState now_;
  StoreParts parts_;  // the above, for the two strategies
  std::unique_ptr<ParamSource> params_;  // where the parameters live between uses (the ZeRO level)
  std::unique_ptr<GradSink> grads_;      // where the gradients accumulate (the ZeRO level)
};

}  // namespace gpt2
