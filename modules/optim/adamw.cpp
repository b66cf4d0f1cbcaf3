#include "modules/optim/adamw.hpp"

#include "tensor/adamw_update.hpp"

namespace gpt2 {

AdamW::AdamW(size_t n, const OptimizerConfig& cfg) : cfg_(cfg), m_("adamw_m", n), v_("adamw_v", n) {}

void AdamW::step(const StepTensors& t, const StepSettings& st) {
  ++t_;
  AdamWStep s;
  s.lr = st.lr, s.beta1 = cfg_.beta1, s.beta2 = cfg_.beta2, s.eps = cfg_.eps;
  s.grad_scale = st.grad_scale;
  s.step = int(t_);
  for_each_decay_run(t.shards, [&](Range run, bool decayed) {
    s.weight_decay = decayed ? cfg_.weight_decay : 0.0;
    for_each_kept_part(run, st.zero_grads ? st.kept : nullptr, [&](Range r, bool kept) {
      s.zero_grads = st.zero_grads && !kept;  // (a kept gradient's next writer stores over it)
      const size_t b = r.begin, n = r.size();
      adamw_update<float>(Vec<float>(t.params.data() + b, n), Vec<float>(t.grads.data() + b, n),
                          Vec<float>(m_.data() + b, n), Vec<float>(v_.data() + b, n), s, t.copy.slice(b, n));
    });
  });
  if (st.zero_grads) zero_uncovered(t.shards, t.grads);
}

std::vector<std::pair<std::string, Vec<float>>> AdamW::state() {
  return {{"m", Vec<float>(m_.data(), m_.extent(0))}, {"v", Vec<float>(v_.data(), v_.extent(0))}};
}

namespace {
[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"adamw", "AdamW, decoupled weight decay on tensors of rank >= 2 (PyTorch semantics)", 0,
     [](const std::vector<TensorShard>&, size_t n, const OptimizerConfig& cfg,
        MatrixShards*) -> std::unique_ptr<Optimizer> { return std::make_unique<AdamW>(n, cfg); }});
}  // namespace

}  // namespace gpt2
