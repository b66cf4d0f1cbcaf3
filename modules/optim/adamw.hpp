#pragma once
// AdamW with decoupled weight decay on tensors of rank >= 2 (matmul weights and embeddings) only:
// element-wise, over each run of neighbouring tensor shards alike in decay (one kernel a run).
#include "plugins/optimizer.hpp"

namespace gpt2 {

class AdamW final : public Optimizer {
 public:
  AdamW(size_t n, const OptimizerConfig& cfg);
  std::string name() const override { return "adamw"; }
  void step(const StepTensors& tensors, const StepSettings& s) override;
  int64_t steps_taken() const override { return t_; }
  void set_steps_taken(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Vec<float>>> state() override;

 private:
  OptimizerConfig cfg_;
  Buffer<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace gpt2
