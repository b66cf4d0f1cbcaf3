#pragma once
// The step's loss and gradient norm. Each token's loss lands in a device buffer (the head stage's);
// reduce() queues the local sums and their all-reduces over the grid (later kernels, the
// optimizer's clipping among them, see the global values); read() waits for them on the host.
#include <memory>

#include "parallel/step_sums.hpp"
#include "train/rank_engine.hpp"

namespace gpt2 {

class LossSums {
 public:
  LossSums(const RankValues& rank, int microbatch_size, const RunConfig& cfg, Tracer& tracer);
  Vec<float> token_losses() { return Vec<float>(losses_.data(), losses_.extent(0)); }
  double* squares() { return sums_->squares(); }  // device: the global sum of squared gradients
  void reduce(int microbatches_run, bool with_grad_norm, int step);
  struct Values {
    double loss = 0, grad_norm = 0;  // mean token loss over the global batch; global gradient L2 norm
  };
  Values read(int64_t counted_tokens, int step);  // the loss: the sum over the counted targets

 private:
  ParamStore& store_;  // the gradients' sum of squares
  bool head_;          // the rank holds the head: the token losses are its
  Tracer& tracer_;
  size_t microbatch_tokens_;  // this rank's tokens of one microbatch
  Buffer<float> losses_;      // the head stage's: each token's loss, microbatch after microbatch
  std::unique_ptr<StepSums> sums_;
};

}  // namespace gpt2
