#pragma once
// The step's two scalars in device memory -- [0] the token-loss sum, [1] the sum of squared
// gradients -- reduced over the grid where their parts live: the loss over the dp replicas (only
// the head stage has token losses; tp ranks each hold all of it), the squares over dp when the
// gradient is sharded (whole gradients are averaged already) and over tp (each holds part of the
// gradient), both over the pipeline's stages. Each all-reduce is ordered before the kernels after
// it on the device (order_after), so later kernels (clipping) read the global values without the
// host; read() is the host's one wait for them: the step's one whole-device wait.
#include "runtime/comm_groups.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

class StepSums {
 public:
  explicit StepSums(const CommGroups& groups);
  double* loss_sum() { return sums_.data(); }       // device
  double* squares() { return sums_.data() + 1; }    // device
  // Queues the reductions of what this rank put there (holds_loss: its stage has token losses).
  void reduce(bool holds_loss, bool with_squares, bool grads_sharded);
  struct Values {
    double loss_sum, squares;
  };
  Values read();  // copied to the host: a whole-device wait (the step's one)

 private:
  const CommGroups& groups_;
  Buffer<double> sums_;
  PinnedBuffer<double> host_;  // made once (a step allocates nothing); page-locked: copied into without a host wait
};

}  // namespace gpt2
