#pragma once
// What the performance model predicts for: a model and its batch (Workload) on a parallel layout
// (Layout: the grid, ZeRO level, pipeline schedule, microbatches, precision).
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "model/activation_sizes.hpp"
#include "model/model_config.hpp"
#include "tensor/precision.hpp"

namespace gpt2 {

struct Workload {
  ModelConfig model;
  int seq_len = 1024;
  int64_t batch = 8;  // GLOBAL sequences per optimizer step
};

// The deck's [parallel] keys that shape the step (train/run_config.hpp's ParallelConfig adds those
// that do not: the backend, threads, a schedule file), as the deck reads them.
struct GridKeys {
  int dp = 1;                     // data-parallel replicas
  int pp = 1;                     // pipeline stages
  int tp = 1;                     // tensor-parallel ranks per layer
  int cp = 1;                     // context parallelism: ranks each sequence's tokens are split over
  int zero = 0;                   // ZeRO level over the dp group: 0 (replicated) .. 3 (FSDP)
  bool sequence_parallel = false; // with tp: LayerNorms and residuals on 1/tp of the rows
  int microbatches = 1;           // per dp rank and step
  std::string schedule = "1f1b";  // a registered pipeline schedule
  int virtual_stages = 1;         // interleaved: chunks of blocks per rank
  std::vector<int> stage_layers;  // blocks per stage (overrides the cost-balanced split)
  double bucket_mb = 0;           // gradient all-reduce bucket MiB; 0: 1 (MPI) or 25 (NCCL)
  Choice<ValueType> grad_reduce_dtype = ValueType::fp32;          // gradients on the wire between dp ranks
  Choice<GatherType> param_gather_dtype = GatherType::automatic;  // ZeRO's parameter all-gather
};

// The deck's [train] keys that shape the step's arithmetic and memory (TrainConfig adds the rest).
struct NumericsKeys {
  // Mixed precision (README, Mixed precision): fp32 | bf16 | fp16, fp32 master weights throughout.
  Choice<Precision> precision = Precision::fp32;
  // Activation recomputation (model/activation_sizes.hpp): none | selective | full, for every
  // recompute_every-th block (block l when l % recompute_every == 0).
  Choice<Recompute> recompute = Recompute::none;
  int recompute_every = 1;
  // The head's logits, loss and their gradients a block of this many rows at a time (0: as many as
  // keep a block's logits within 2^24 values): the whole (N, V) logits never exist.
  int loss_chunk_rows = 0;
  // train.optimizer = "muon" (modules/optim/muon): Newton-Schulz steps, and their products' inputs:
  // fp32 | bf16 (fp32 accumulation).
  int ns_steps = 5;
  Choice<ValueType> ns_dtype = ValueType::fp32;
};

// A layout as the planner prices it: the deck's keys (RunConfig::layout() takes them whole), what
// the run resolves, and how other trainers run what the trainer runs its own way.
struct Layout : GridKeys, NumericsKeys {
  // The optimizer takes whole matrices (train.optimizer = "muon"): each rank's block matrices
  // through ns_steps Newton-Schulz steps.
  bool whole_matrices = false;
  // Priced as other trainers run it (gpt2 simulate --batch's perf.* keys; the trainer itself refuses):
  // ZeRO 1/2: the parameters' all-gather after the update overlapped with the next step's first
  // forward (Megatron-LM's --overlap-param-gather) instead of ending the step.
  bool overlap_param_gather = false;
  // ZeRO 0/1: the gradients reduced once the rank's last backward is done, bucket after bucket (as
  // Megatron-LM's "local" DDP of 2021 did), instead of each unit's as its last backward completes.
  bool reduce_after_backward = false;
  // Attention as one fused kernel (FlashAttention, cuDNN's): no scores in memory, the causal half of
  // the products at the hardware's flash_attention_efficiency.
  bool fused_attention = false;
  // A block's tensor-parallel collectives overlapped with its GEMMs (Megatron-LM's --tp-comm-overlap):
  // only what exceeds the block's compute is exposed.
  bool tp_comm_overlap = false;
  // ZeRO-3: the next unit's gather issued as a unit starts (the trainer's prefetch); false: once the
  // unit before it ends (DeepSpeed's default stage3_prefetch_bucket_size, 5e7 values, is less than
  // a unit of a large model: its gathers run between the units' compute).
  bool zero3_prefetch = true;
  // ZeRO-1: the gradients all-reduced whole, each replica then updating its shard, instead of
  // reduce-scattered (DeepSpeed's BF16_Optimizer under its pipeline engine).
  bool grad_all_reduce = false;
  // The loss as Megatron-LM computes it without --cross-entropy-loss-fusion: the logits cast to fp32,
  // then their maximum, the shift, exp, the sum and the division each a pass over them, the backward a
  // scale and a cast back -- 52 bytes a logit, where the trainer's fused kernel moves 3 values.
  bool fp32_loss = false;

  long long world() const { return (long long)dp * tp * pp * cp; }
  // What a pipeline's passes cost depends on (every field but the ZeRO level and how the data-parallel
  // communication runs): a key for caches of the performance model.
  std::string pass_key() const {
    std::string k = schedule + '|' + word(precision) + '|' + word(recompute) + '|';
    for (int v : {dp, tp, pp, cp, microbatches, virtual_stages, recompute_every, int(sequence_parallel), int(fused_attention),
                  int(tp_comm_overlap), int(fp32_loss)})
      k += std::to_string(v) + ',';
    for (int n : stage_layers) k += std::to_string(n) + ';';
    return k;
  }
  int bytes_per_value() const { return precision == Precision::fp32 ? 4 : 2; }
  // "dp 2 x tp 1 x pp 2, zero 0, 1f1b, m 4, fp32"
  std::string describe() const {
    std::ostringstream os;
    os << "dp " << dp << " x tp " << tp << (sequence_parallel ? " (sp)" : "") << " x pp " << pp;
    if (cp > 1) os << " x cp " << cp;
    os << ", zero " << zero;
    if (pp > 1) os << ", " << schedule << (virtual_stages > 1 ? " v" + std::to_string(virtual_stages) : "");
    os << ", m " << microbatches << ", " << word(precision);
    if (recompute != Recompute::none) os << ", recompute " << word(recompute) << (recompute_every > 1 ? "/" + std::to_string(recompute_every) : "");
    return os.str();
  }
};

// What a layout breaks of the one rule set (perf/layout_check.cpp): the deck key to blame and why.
struct LayoutProblem {
  std::string key, message;  // empty: none
  explicit operator bool() const { return !key.empty(); }
};
LayoutProblem layout_problem(const Workload& w, const Layout& l);

}  // namespace gpt2
