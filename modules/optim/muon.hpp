#pragma once
// Muon for the blocks' matrices (qkv, attention projection, fc, fc projection), AdamW for everything
// else (embeddings and the tied head, biases, LayerNorms): train.optimizer = "muon". Each matrix:
// momentum with Nesterov (train.muon_momentum), the Newton-Schulz quintic (train.ns_steps) on its
// Frobenius-normalised update in fp32, the update scaled by max(1, rows / cols)^0.5, decoupled weight
// decay; its rate is train.muon_lr times the schedule's fraction of train.lr. It needs each matrix
// whole on the rank: parallel.zero = 0 and parallel.tp = 1 (checked with the deck).
#include <memory>

#include "model/optimizer.hpp"
#include "modules/optim/adamw.hpp"

namespace gpt2 {

class Muon final : public Optimizer {
 public:
  Muon(const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg);
  std::string name() const override { return "muon"; }
  void step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
            const WorkingCopy& copy) override;
  int64_t steps_taken() const override { return adamw_->steps_taken(); }
  void set_steps_taken(int64_t n) override { adamw_->set_steps_taken(n); }
  std::vector<std::pair<std::string, Vec<float>>> state() override;

 private:
  struct Matrix {
    Range range;
    int rows, cols;
  };
  std::vector<Matrix> matrices_;
  std::unique_ptr<AdamW> adamw_;  // the other tensors (it also zeroes the matrices' gradients)
  OptimizerConfig cfg_;
  Buffer<float> momentum_;        // the parameter layout (0 outside the matrices)
  Buffer<float> x_, y_, a_, b_;   // Newton-Schulz workspaces, sized for the largest matrix
  Buffer<double> sumsq_;
};

}  // namespace gpt2
