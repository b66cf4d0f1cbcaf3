#pragma once
// Seconds for each piece of a training step on one rank: a model unit's forward, backward (input
// gradients B and weight gradients W), the blocking tensor-parallel collectives, the data-parallel
// and pipeline communication, the optimizer.
//
// Compute: each unit's work is counted -- GEMM FLOPs, attention FLOPs, bytes streamed by the
// memory-bound kernels (LayerNorm, GELU, softmax, residuals, embedding, cross-entropy) and kernels
// launched -- for a microbatch of b sequences on a tp split, and turned into time at the hardware's
// rates (peak x gemm_efficiency, bandwidth x memory_efficiency, kernel_overhead each). With a
// calibration trace every unit kind's time is the measured one scaled by (modelled time here) /
// (modelled time at the traced shape): FLOPs and bytes carry it to other microbatch sizes,
// tensor-parallel splits and precisions, the measurement fixes the machine's real rates.
// tp divides the GEMMs, the attention and the tensor-parallel region's elementwise work; the
// residual stream's (LayerNorms, residual adds) only with sequence parallelism.
//
// Communication (alpha-beta, ring algorithms as NCCL runs them, link by group placement):
//   all-reduce      2 (n-1) alpha + 2 (n-1)/n * S / beta
//   reduce-scatter  (n-1) alpha + (n-1)/n * S / beta     (S: the whole buffer)
//   all-gather      (n-1) alpha + (n-1)/n * S / beta
//   send / recv     alpha + S / beta
#include <string>
#include <vector>

#include "perf/calibration.hpp"
#include "perf/hardware.hpp"
#include "perf/layout.hpp"

namespace gpt2 {

// One unit's work for one microbatch on one rank.
struct Work {
  double gemm_flops = 0, attention_flops = 0, bytes = 0;
  int kernels = 0;
};

struct UnitWork {
  Work forward, backward_input, backward_weight;
};

// Times of one unit for one microbatch (s). The head's forward includes the loss and the LM head's
// backward (the trainer runs them there), its backward only the final LayerNorm's.
struct UnitTime {
  double forward = 0, backward_input = 0, backward_weight = 0;
  double backward() const { return backward_input + backward_weight; }
};

class CostModel {
 public:
  // cal (may be null): per-op times measured on this hardware, of the same model shape.
  CostModel(const Workload& w, const Hardware& hw, const Calibration* cal = nullptr);

  const Workload& workload() const { return w_; }
  const Hardware& hardware() const { return hw_; }
  bool calibrated() const { return cal_ != nullptr; }
  // Prices every communication at zero (to see what communication adds to a step).
  void set_free_communication(bool free) { free_comm_ = free; }

  // Unit u: 0 embedding, 1 + l block l, n_layer + 1 head (as trace.units numbers them).
  UnitWork unit_work(int u, int b, const Layout& l) const;
  UnitTime unit_time(int u, int b, const Layout& l) const;
  // Blocking tensor-parallel collectives of unit u for one microbatch (forward; backward).
  double tp_forward(int u, int b, const Layout& l) const;
  double tp_backward(int u, int b, const Layout& l) const;
  // A block's exposed ring-attention shifts for one microbatch (context parallelism; 0 when cp = 1).
  double cp_forward(int b, const Layout& l) const;
  double cp_backward(int b, const Layout& l) const;
  double data(int b) const;            // loading one microbatch (first and last stage)
  double optimizer(double params) const;  // the update of a shard of `params`
  // Zeroing the gradients and computing their norm, per local parameter (other: the part outside
  // every traced event), split in two equal passes.
  double gradient_pass(double params) const;

  // Collectives over n ranks of a group whose members are `stride` world ranks apart.
  double all_reduce(double bytes, int n, int stride) const;
  double reduce_scatter(double bytes, int n, int stride) const;  // bytes: the whole buffer
  double all_gather(double bytes, int n, int stride) const;      // bytes: the whole buffer
  double send(double bytes, int stride) const;                   // one message to a neighbour

  // Relative standard deviation of a unit's compute time: the calibration trace's (0 without one).
  double jitter() const { return cal_ ? cal_->jitter : 0.0; }
  // Expected maximum of n independent standard normal values (0 for n = 1): how far the slowest of
  // n ranks lags behind, in standard deviations, at a collective that waits for all of them.
  // (Computed numerically; not thread-safe, as the planner is single-threaded.)
  static double expected_max_normal(int n);

  // Factor on every compute time of a layout: its ranks fill nodes in order, and a node whose
  // devices are all busy computes shared_slowdown times slower per rank (1 with one rank a node).
  double node_slowdown(const Layout& l) const;

  // Seconds of `work` at this hardware's modelled rates at a precision.
  double modelled(const Work& work, const std::string& precision) const;

 private:
  double scale(int u, int phase) const;  // calibration factor of a unit kind's phase (0 fwd, 1 bwd)
  Workload w_;
  Hardware hw_;
  const Calibration* cal_;
  double scale_[3][2] = {{1, 1}, {1, 1}, {1, 1}};  // [embedding, block, head][forward, backward]
  bool free_comm_ = false;
};

}  // namespace gpt2
