#pragma once
// Seconds for each piece of a training step on one rank: a model unit's forward, backward (input
// gradients B and weight gradients W), the blocking tensor-parallel collectives, the data-parallel
// and pipeline communication, the optimizer.
//
// Compute: each unit's work is counted -- its GEMMs (shapes and FLOPs), attention's batched GEMMs,
// bytes streamed by the memory-bound kernels (LayerNorm, GELU, softmax, residuals, embedding,
// cross-entropy) and kernels launched -- for a microbatch of b sequences on a tp split, and turned
// into time at the hardware's rates: bandwidth x memory_efficiency, kernel_overhead each, and each
// GEMM by its shape (gemm_seconds: tiles in waves over the multiprocessors, a tile's fixed cost, the
// memory roofline) where the hardware file gives multiprocessors, else peak x gemm_efficiency. With a
// calibration trace every unit kind's time is the measured one (less its launches) scaled by (modelled
// time here) / (modelled time at the traced shape), plus this shape's launches: FLOPs and bytes carry
// it to other microbatch sizes, tensor-parallel splits and precisions, the measurement fixes the
// machine's real rates. Context parallelism's ring is priced by its tiles (add_ring_work).
// tp divides the GEMMs, the attention and the tensor-parallel region's elementwise work; the
// residual stream's (LayerNorms, residual adds) only with sequence parallelism.
//
// Layouts priced as other trainers run them (Layout's perf.* fields): fused attention drops the
// scores' traffic and runs the causal half of attention at flash_attention_efficiency;
// tp_comm_overlap leaves only what a block's collectives take beyond its compute; fp32_loss streams
// the logits as Megatron-LM's unfused fp32 loss does.
//
// Communication (alpha-beta as NCCL's own tuning model prices its algorithms, src/graph/tuning.cc;
// ranks fill nodes in order, so a group of n ranks `stride` apart spans `nodes` nodes):
//   ring all-reduce  a0 + (2(n-1) - h) alpha_intra + h alpha_inter + 2 (n-1)/n * S / beta,
//                    h = 2 (nodes - 1) steps cross a node
//   tree all-reduce  a0 + 2 ((n/nodes - 1) alpha_intra + log2(nodes) alpha_inter) + 2 S / (0.9 beta)
//                    (3 or more nodes; NCCL picks the faster of the two)
//   reduce-scatter   a0 + (n-1 - h) alpha_intra + h alpha_inter + (n-1)/n * S / beta, h = nodes - 1
//   all-gather       as reduce-scatter                      (S: the whole buffer)
//   send / recv      alpha + S / beta
// beta: the node's links inside one node, else each rank's share of the network (inter_node);
// a0: the hardware's collective_latency.
#include <string>
#include <vector>

#include "perf/calibration.hpp"
#include "perf/hardware.hpp"
#include "perf/layout.hpp"

namespace gpt2 {

// A GEMM C (m x n) = A (m x k) B (k x n), `batch` of them (a strided batch).
struct Gemm {
  double m = 0, n = 0, k = 0, batch = 1;
  double flops() const { return 2 * m * n * k * batch; }
};

// One unit's work for one microbatch on one rank.
struct Work {
  double gemm_flops = 0, attention_flops = 0, bytes = 0;
  int kernels = 0;
  // The shapes behind gemm_flops and attention_flops (attention: its batched products per head).
  Gemm gemms[4], attention[4];
  int n_gemms = 0, n_attention = 0;
  void add_gemm(const Gemm& g) { gemms[n_gemms++] = g, gemm_flops += g.flops(); }
  void add_attention(const Gemm& g) { attention[n_attention++] = g, attention_flops += g.flops(); }
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
  bool free_communication() const { return free_comm_; }
  // Different for every CostModel constructed (copies keep it): what a cache of its prices keys on.
  unsigned long long serial() const { return serial_; }

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
  // Muon's Newton-Schulz products (fp32 GEMMs), `matrices` x steps of them launched.
  double newton_schulz(double flops, int launches, ValueType dtype = ValueType::fp32) const;

  // Collectives over n ranks of a group whose members are `stride` world ranks apart.
  double all_reduce(double bytes, int n, int stride) const;
  double reduce_scatter(double bytes, int n, int stride) const;  // bytes: the whole buffer
  double all_gather(double bytes, int n, int stride) const;      // bytes: the whole buffer
  double send(double bytes, int stride) const;                   // one message to a neighbour
  // Where a group of n ranks `stride` apart sits: members per node, nodes.
  struct Group {
    int per_node = 1, nodes = 1;
  };
  Group group(int n, int stride) const;

  // Relative standard deviation of a unit's compute time: the calibration trace's (0 without one).
  double jitter() const { return cal_ ? cal_->jitter : 0.0; }
  // Expected maximum of n independent standard normal values (0 for n = 1): how far the slowest of
  // n ranks lags behind, in standard deviations, at a collective that waits for all of them.
  // (Computed numerically; not thread-safe, as the planner is single-threaded.)
  static double expected_max_normal(int n);

  // Factor on every compute time of a layout: its ranks fill nodes in order, and a node whose
  // devices are all busy computes shared_slowdown times slower per rank (1 with one rank a node).
  double node_slowdown(const Layout& l) const;

  // Seconds of `work` at this hardware's modelled rates at a precision (fused: attention as one
  // fused kernel at the hardware's flash_attention_efficiency, where it gives one), without its
  // launches (work.kernels x kernel_overhead, which unit_time adds outside the calibration's scale).
  double modelled(const Work& work, Precision precision, bool fused_attention = false) const;
  // Seconds of one GEMM (or strided batch) on this hardware at a precision: without multiprocessors in
  // the hardware file, its FLOPs at peak x gemm_efficiency; with them, the fastest of the library's
  // tiles (the largest, its transpose, and halves and quarters of it, each at gemm_efficiency x the
  // square root of its arithmetic intensity against the largest's): ceil(m/tm) ceil(n/tn) batch tiles
  // run in waves of `multiprocessors`, each at (K / (K + gemm_k_overhead)) of its rate; and never
  // faster than reading A and B and writing C at the memory's rate.
  double gemm_seconds(const Gemm& g, Precision precision) const;

 private:
  double scale(int u, int phase) const;  // calibration factor of a unit kind's phase (0 fwd, 1 bwd)
  // A block's attention under context parallelism's (unfused) ring: its tiles' products, traffic
  // and launches, added to w for a microbatch of b sequences.
  void add_ring_work(UnitWork& w, int b, const Layout& l) const;
  // A ring collective of `steps` steps moving bytes_per_rank through each rank, inter_steps of them
  // across nodes.
  double ring(double steps, double bytes_per_rank, int n, int stride, int inter_steps) const;
  Workload w_;
  Hardware hw_;
  const Calibration* cal_;
  double scale_[3][2] = {{1, 1}, {1, 1}, {1, 1}};  // [embedding, block, head][forward, backward]
  bool free_comm_ = false;
  unsigned long long serial_ = 0;
};

}  // namespace gpt2
