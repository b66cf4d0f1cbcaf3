// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an
// interpolation of momentum and gradient, decoupled weight decay on tensors of rank >= 2;
// train.optimizer = "lion", with train.beta1 / train.beta2 (the paper's 0.9 / 0.99) and train.lr
// (typically 3-10x below AdamW's). Per element, with g' = grad_scale * g:
//   p = p (1 - lr wd) - lr sign(b1 m + (1 - b1) g');   m = b2 m + (1 - b2) g';   g = 0 if zero_grads
#include "plugins/optimizer.hpp"
#include "tensor/traffic.hpp"

namespace gpt2 {
namespace {

struct LionStep {
  float keep, rate, b1, b2;  // 1 - lr wd, lr, the betas
  bool zero_grads;
};

// One span's update (a named function: a device lambda may not sit inside the generic lambda that
// picks Write).
template <class Write>
void lion_pass(Vec<float> p, Vec<float> g, Vec<float> m, const LionStep& st, GradScale s, Write write) {
  const float keep = st.keep, rate = st.rate, b1 = st.b1, b2 = st.b2;
  const bool zero_grads = st.zero_grads;
  for_each_index(
      "lion_update", int64_t(p.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const float gi = g(i) * float(s());
        const float c = b1 * m(i) + (1.0f - b1) * gi;
        const float pi = keep * p(i) - rate * float((c > 0) - (c < 0));
        p(i) = pi;
        m(i) = b2 * m(i) + (1.0f - b2) * gi;
        if (zero_grads) g(i) = 0.0f;
        write(i, pi);
      });
}

class Lion final : public Optimizer {
 public:
  Lion(size_t n, const OptimizerConfig& cfg) : cfg_(cfg), m_("lion_m", n) {}
  std::string name() const override { return "lion"; }
  void step(const StepTensors& t, const StepSettings& set) override {
    ++t_;
    const GradScale s = set.grad_scale.on_host_if_possible();
    const double lr = set.lr;
    for_each_decay_run(t.shards, [&](Range r, bool decayed) {
      const size_t b = r.begin, n = r.size();
      const Vec<float> p(t.params.data() + b, n), g(t.grads.data() + b, n), m(m_.data() + b, n);
      const LionStep st{float(1 - lr * (decayed ? cfg_.weight_decay : 0.0)), float(lr), float(cfg_.beta1),
                        float(cfg_.beta2), set.zero_grads};
      count_traffic(bytes_of(p, g, m), bytes_of(p, m) + (set.zero_grads ? bytes_of(g) : 0));
      detail::with_copy_writer(t.copy.slice(b, n), [&](auto write) { lion_pass(p, g, m, st, s, write); });
    });
    if (set.zero_grads) zero_uncovered(t.shards, t.grads);
  }
  int64_t steps_taken() const override { return t_; }
  void set_steps_taken(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Vec<float>>> state() override {
    return {{"m", Vec<float>(m_.data(), m_.extent(0))}};
  }

 private:
  OptimizerConfig cfg_;
  Buffer<float> m_;
  int64_t t_ = 0;
};

[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"lion", "Lion: the sign of interpolated momentum, decoupled weight decay on tensors of rank >= 2", 2,
     [](const std::vector<TensorShard>&, size_t n, const OptimizerConfig& cfg,
        MatrixShards*) -> std::unique_ptr<Optimizer> { return std::make_unique<Lion>(n, cfg); }});

}  // namespace
}  // namespace gpt2
