#pragma once
// Optimizer interface: updates a stage's local flat parameter buffer from its gradient buffer.
// Implementations live in modules/optim and are chosen by name.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/param_layout.hpp"
#include "tensor/adamw.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

struct OptimizerConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update; gradients are multiplied by grad_scale (the clipping factor, possibly still on the
  // device) on the fly.
  virtual void step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale) = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t n) = 0;
  // Named state buffers in the parameter layout (AdamW: "m", "v"), for checkpoints.
  virtual std::vector<std::pair<std::string, Vec<float>>> state() = 0;
};

// tensors: the local layout (which ranges get weight decay); n: local buffer size.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const std::vector<TensorInfo>& tensors,
                                          size_t n, const OptimizerConfig& cfg);

}  // namespace gpt2
