#pragma once
// What the performance model predicts for: a model and its batch (Workload) on a parallel layout
// (Layout: the grid, ZeRO level, pipeline schedule, microbatches, precision).
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace gpt2 {

struct Workload {
  ModelConfig model;
  int seq_len = 1024;
  int64_t batch = 8;  // GLOBAL sequences per optimizer step
};

struct Layout {
  int dp = 1, tp = 1, pp = 1, zero = 0, microbatches = 1;
  int cp = 1;                      // context parallelism: ranks a sequence's tokens are split over
  std::string schedule = "1f1b";
  int virtual_stages = 1;          // interleaved: chunks of blocks per rank
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (16-bit GEMM inputs and communication)
  bool sequence_parallel = false;
  std::vector<int> stage_layers;   // blocks per stage; empty: the cost-balanced split
  double bucket_mb = 0;            // gradient bucket MiB; 0: 1 without overlap (MPI), else 25 (NCCL)
  std::string recompute = "none";  // activation recomputation: none | selective | full
  std::string optimizer = "adamw";  // muon: each rank's block matrices through ns_steps Newton-Schulz steps
  int ns_steps = 5;
  std::string ns_dtype = "fp32";    // the Newton-Schulz products' inputs: fp32 | bf16
  std::string grad_reduce_dtype = "fp32";   // gradients on the wire between replicas: fp32 | bf16
  std::string param_gather_dtype = "auto";  // ZeRO's gathers: auto (16-bit matrices when mixed) | fp32
  int recompute_every = 1;         // of every this many blocks, the first recomputes
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
  // The head's logits a block of rows at a time (train.loss_chunk_rows; 0: automatic): memory only.
  int loss_chunk_rows = 0;

  long long world() const { return (long long)dp * tp * pp * cp; }
  // What a pipeline's passes cost depends on (every field but the ZeRO level and how the data-parallel
  // communication runs): a key for caches of the performance model.
  std::string pass_key() const {
    std::string k = schedule + '|' + precision + '|' + recompute + '|';
    for (int v : {dp, tp, pp, cp, microbatches, virtual_stages, recompute_every, int(sequence_parallel), int(fused_attention),
                  int(tp_comm_overlap), int(fp32_loss)})
      k += std::to_string(v) + ',';
    for (int n : stage_layers) k += std::to_string(n) + ';';
    return k;
  }
  int bytes_per_value() const { return precision == "fp32" ? 4 : 2; }
  // "dp 2 x tp 1 x pp 2, zero 0, 1f1b, m 4, fp32"
  std::string describe() const {
    std::ostringstream os;
    os << "dp " << dp << " x tp " << tp << (sequence_parallel ? " (sp)" : "") << " x pp " << pp;
    if (cp > 1) os << " x cp " << cp;
    os << ", zero " << zero;
    if (pp > 1) os << ", " << schedule << (virtual_stages > 1 ? " v" + std::to_string(virtual_stages) : "");
    os << ", m " << microbatches << ", " << precision;
    if (recompute != "none") os << ", recompute " << recompute << (recompute_every > 1 ? "/" + std::to_string(recompute_every) : "");
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
