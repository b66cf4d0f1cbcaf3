#pragma once
// AdamW with decoupled weight decay on tensors of rank >= 2 (matmul weights and embeddings) only.
#include "model/optimizer.hpp"

namespace gpt2 {

class AdamW final : public Optimizer {
 public:
  AdamW(const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg);
  std::string name() const override { return "adamw"; }
  void step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
            const WorkingCopy& copy) override;
  int64_t steps_taken() const override { return t_; }
  void set_steps_taken(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Vec<float>>> state() override;

 private:
  DecaySpans spans_;
  OptimizerConfig cfg_;
  Buffer<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace gpt2
