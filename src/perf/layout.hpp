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
  int recompute_every = 1;         // of every this many blocks, the first recomputes

  long long world() const { return (long long)dp * tp * pp * cp; }
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
