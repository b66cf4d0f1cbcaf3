#pragma once
// The optimizer interface. Implementations live in modules/optim and register themselves
// (train.optimizer); the learning-rate schedules have theirs in plugins/lr_schedule.hpp.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plugins/registry.hpp"
#include "plugins/tensor_shard.hpp"
#include "tensor/adamw_update.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

struct OptimizerConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double lr = 3e-4;  // train.lr: the schedule's peak, against which a step's rate is a fraction
  // Muon (modules/optim/muon): its peak rate for the blocks' matrices, momentum, Newton-Schulz steps.
  double muon_lr = 0.02, muon_momentum = 0.95;
  int ns_steps = 5;
  bool ns_bf16 = false;  // the Newton-Schulz products read bf16 roundings (fp32 accumulation)
};

// Whole matrices for an optimizer that needs them (Muon), where the ranks hold parts of them: ZeRO's
// shards over the data-parallel replicas, tensor parallelism's slices (parallel/matrix_shards). The
// matrices are dealt out by cost: each is made whole on one owner per replica group (with its tp
// peers, which own the same ones), and its result goes back to every rank that holds a part. All
// matrices move at once, so the owners compute at the same time.
class MatrixShards {
 public:
  struct Matrix {
    int rows = 0, cols = 0;  // the whole matrix (tp: its global shape, up to a permutation of rows)
    Range run;               // this rank's part, in the optimizer's buffer (may be empty)
    bool owned = false;      // this rank makes it whole and orthogonalises it
    size_t at = 0;           // owned: where it sits in the owned buffer (rows * cols values)
  };
  virtual ~MatrixShards() = default;
  virtual const std::vector<Matrix>& matrices() const = 0;
  virtual size_t owned_size() const = 0;  // values of the owned matrices, whole
  // Every matrix from its runs (`runs`: the optimizer's buffer layout) into its owner's `owned`.
  virtual void gather(const float* runs, float* owned) = 0;
  // The owners' `owned` back into every rank's runs.
  virtual void scatter(const float* owned, float* runs) = 0;
};

// The Newton-Schulz iteration's FLOPs on a (rows, cols) matrix: per step the Gram matrix, its square
// and the product back (m = min, n = max of the sides).
double newton_schulz_flops(double rows, double cols, int steps);
// Owners for items of these costs among `ranks`: longest first, each to the least loaded rank (the
// lowest of equals). The same on every rank (MatrixShards deals the matrices so; the planner prices it).
std::vector<int> deal_by_cost(const std::vector<double>& cost, int ranks);

// One update's tensors: the rank's tensor shards (in the order of their runs) over its buffers.
// copy, when not empty: the parameters' 16-bit working copy (the buffers' layout), written with the
// new values in the same pass (tensor/working_copy.hpp).
struct StepTensors {
  const std::vector<TensorShard>& shards;
  Vec<float> params, grads;
  const WorkingCopy& copy;
  Vec<float> param(const TensorShard& t) const { return Vec<float>(params.data() + t.run.begin, t.run.size()); }
  Vec<float> grad(const TensorShard& t) const { return Vec<float>(grads.data() + t.run.begin, t.run.size()); }
};

struct StepSettings {
  double lr = 0;          // the schedule's rate (train.lr's scale)
  GradScale grad_scale;   // multiplies the gradients on the fly (the clipping factor, maybe on the device)
  bool zero_grads = false;  // leave every gradient 0 in the same pass (the next step accumulates),
  // but those in `kept` (sorted, disjoint; may be null) may be left as they are: the next step's
  // first writer stores over them (parallel/grad_sink.hpp). Zeroing them too is correct, only slower.
  const std::vector<Range>* kept = nullptr;
};

// Steps a rank's tensor shards. It is made with the same list it is then stepped over (its state
// follows the shards' runs), and keeps nothing of the parameters but that state.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual void step(const StepTensors& tensors, const StepSettings& s) = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t n) = 0;
  // Named state buffers in the buffers' layout (AdamW: "m", "v"), for checkpoints.
  virtual std::vector<std::pair<std::string, Vec<float>>> state() = 0;
};

// An element-wise optimizer's walk over its shards: f(range, decayed) for each maximal run of
// neighbouring shards alike in weight decay (fewer, longer kernels).
template <class F>
void for_each_decay_run(const std::vector<TensorShard>& shards, F f) {
  for (size_t i = 0; i < shards.size();) {
    Range r = shards[i].run;
    const bool d = shards[i].decayed();
    size_t j = i + 1;
    for (; j < shards.size() && shards[j].decayed() == d && shards[j].run.begin == r.end; ++j) r.end = shards[j].run.end;
    f(r, d);
    i = j;
  }
}
// f(part, in_kept) over r cut at the ends of `kept` (StepSettings::kept): its parts in order.
template <class F>
void for_each_kept_part(Range r, const std::vector<Range>* kept, F f) {
  size_t at = r.begin;
  for (size_t i = 0; kept && i < kept->size() && at < r.end; ++i) {
    const size_t b = std::max((*kept)[i].begin, at), e = std::min((*kept)[i].end, r.end);
    if (b >= e) continue;
    if (at < b) f(Range{at, b}, false);
    f(Range{b, e}, true);
    at = e;
  }
  if (at < r.end) f(Range{at, r.end}, false);
}
// The gradients no shard covers to 0, in the buffer of n (no GEMM reads them).
void zero_uncovered(const std::vector<TensorShard>& shards, Vec<float> grads);

struct OptimizerEntry {
  std::string name, help;
  int order = 0;
  // shards: the tensors it will step (their runs in buffers of n values); matrices: the block
  // matrices made whole (null: every tensor is whole in the buffer).
  std::function<std::unique_ptr<Optimizer>(const std::vector<TensorShard>& shards, size_t n,
                                           const OptimizerConfig& cfg, MatrixShards* matrices)>
      make;
  bool whole_matrices = false;  // it needs `matrices` where the ranks hold parts of a matrix
};
using OptimizerRegistry = Registry<OptimizerEntry>;

// name: train.optimizer; InputError for an unknown one.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorShard>& shards,
                                          size_t n, const OptimizerConfig& cfg, MatrixShards* matrices = nullptr);

}  // namespace gpt2
