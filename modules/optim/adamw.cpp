#include "modules/optim/adamw.hpp"

#include "tensor/adamw_update.hpp"

namespace gpt2 {

AdamW::AdamW(const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg)
    : cfg_(cfg), m_("adamw_m", n), v_("adamw_v", n) {
  // Merge neighbouring tensors with the same decay flag: fewer, longer kernels.
  for (const TensorInfo& t : tensors) {
    if (!spans_.empty() && spans_.back().decay == t.decay && spans_.back().range.end == t.range.begin)
      spans_.back().range.end = t.range.end;
    else
      spans_.push_back({t.range, t.decay});
  }
  size_t at = 0;
  for (const Span& sp : spans_) {
    if (sp.range.begin > at) gaps_.push_back({at, sp.range.begin});
    at = sp.range.end;
  }
  if (at < n) gaps_.push_back({at, n});
}

void AdamW::step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
                 const WorkingCopy& copy) {
  ++t_;
  AdamWStep s;
  s.lr = lr, s.beta1 = cfg_.beta1, s.beta2 = cfg_.beta2, s.eps = cfg_.eps;
  s.grad_scale = grad_scale;
  s.step = int(t_);
  s.zero_grads = zero_grads;
  for (const Span& sp : spans_) {
    s.weight_decay = sp.decay ? cfg_.weight_decay : 0.0;
    const size_t b = sp.range.begin, n = sp.range.size();
    adamw_update<float>(Vec<float>(params.data() + b, n), Vec<float>(grads.data() + b, n),
                        Vec<float>(m_.data() + b, n), Vec<float>(v_.data() + b, n), s, copy.slice(b, n));
  }
  // The gaps hold no tensor (no GEMM reads them): their copy is left as it was.
  if (zero_grads)
    for (const Range& r : gaps_) Kokkos::deep_copy(ExecSpace(), Vec<float>(grads.data() + r.begin, r.size()), 0.0f);
}

std::vector<std::pair<std::string, Vec<float>>> AdamW::state() {
  return {{"m", Vec<float>(m_.data(), m_.extent(0))}, {"v", Vec<float>(v_.data(), v_.extent(0))}};
}

namespace {
[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"adamw", "AdamW, decoupled weight decay on tensors of rank >= 2 (PyTorch semantics)", 0,
     [](const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg) -> std::unique_ptr<Optimizer> {
       return std::make_unique<AdamW>(tensors, n, cfg);
     }});
}  // namespace

}  // namespace gpt2
