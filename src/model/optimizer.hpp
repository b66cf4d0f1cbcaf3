#pragma once
// Optimizer and learning-rate schedule interfaces. Implementations live in modules/optim and
// register themselves (train.optimizer, train.schedule).
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.hpp"
#include "core/registry.hpp"
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

// Updates a rank's local flat parameter buffer from its gradient buffer.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update; gradients are multiplied by grad_scale (the clipping factor, possibly still on the
  // device) on the fly. zero_grads: leaves every gradient 0 (the next step accumulates into them),
  // in the same pass. copy, when not empty: the parameters' 16-bit working copy (the same layout),
  // written with the new values in the same pass (tensor/working_copy.hpp).
  virtual void step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
                    const WorkingCopy& copy) = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t n) = 0;
  // Named state buffers in the parameter layout (AdamW: "m", "v"), for checkpoints.
  virtual std::vector<std::pair<std::string, Vec<float>>> state() = 0;
};

// An element-wise optimizer's walk over the buffer: maximal runs of tensors with the same decay
// flag (fewer, longer kernels), and the parts no tensor covers (their gradients only zeroed).
struct DecaySpans {
  struct Span {
    Range range;
    bool decay;
  };
  std::vector<Span> spans;
  std::vector<Range> gaps;
  DecaySpans(const std::vector<TensorInfo>& tensors, size_t n);
  void zero_gaps(Vec<float> grads) const;  // the gaps' gradients to 0 (no GEMM reads their copy)
};

struct OptimizerEntry {
  std::string name, help;
  int order = 0;
  // tensors: the local layout (which ranges get weight decay); n: local buffer size; matrices: the
  // block matrices made whole (null: every tensor is whole in the buffer).
  std::function<std::unique_ptr<Optimizer>(const std::vector<TensorInfo>& tensors, size_t n,
                                           const OptimizerConfig& cfg, MatrixShards* matrices)>
      make;
  bool whole_matrices = false;  // it needs `matrices` where the ranks hold parts of a matrix
};
using OptimizerRegistry = Registry<OptimizerEntry>;

// name: train.optimizer; InputError for an unknown one.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorInfo>& tensors,
                                          size_t n, const OptimizerConfig& cfg, MatrixShards* matrices = nullptr);

// Learning rate at a (0-based) step. Every schedule starts with a linear warm-up over warmup_steps.
struct LrSchedule {
  std::string kind = "constant";
  double lr = 3e-4, min_lr = 0;
  int warmup_steps = 0, total_steps = 1;
};

struct LrScheduleEntry {
  std::string name, help;
  int order = 0;
  // The rate after warm-up (step >= warmup_steps).
  std::function<double(const LrSchedule&, int step)> after_warmup;
};
using LrScheduleRegistry = Registry<LrScheduleEntry>;

double learning_rate(const LrSchedule& s, int step);

}  // namespace gpt2
