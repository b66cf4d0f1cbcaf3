#include "modules/optim/adamw.hpp"

#include "tensor/adamw_update.hpp"

namespace gpt2 {

AdamW::AdamW(const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg)
    : spans_(tensors, n), cfg_(cfg), m_("adamw_m", n), v_("adamw_v", n) {}

void AdamW::step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
                 const WorkingCopy& copy) {
  ++t_;
  AdamWStep s;
  s.lr = lr, s.beta1 = cfg_.beta1, s.beta2 = cfg_.beta2, s.eps = cfg_.eps;
  s.grad_scale = grad_scale;
  s.step = int(t_);
  s.zero_grads = zero_grads;
  for (const DecaySpans::Span& sp : spans_.spans) {
    s.weight_decay = sp.decay ? cfg_.weight_decay : 0.0;
    const size_t b = sp.range.begin, n = sp.range.size();
    adamw_update<float>(Vec<float>(params.data() + b, n), Vec<float>(grads.data() + b, n),
                        Vec<float>(m_.data() + b, n), Vec<float>(v_.data() + b, n), s, copy.slice(b, n));
  }
  if (zero_grads) spans_.zero_gaps(grads);
}

std::vector<std::pair<std::string, Vec<float>>> AdamW::state() {
  return {{"m", Vec<float>(m_.data(), m_.extent(0))}, {"v", Vec<float>(v_.data(), v_.extent(0))}};
}

namespace {
[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"adamw", "AdamW, decoupled weight decay on tensors of rank >= 2 (PyTorch semantics)", 0,
     [](const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg,
        MatrixShards*) -> std::unique_ptr<Optimizer> {
       return std::make_unique<AdamW>(tensors, n, cfg);
     }});
}  // namespace

}  // namespace gpt2
