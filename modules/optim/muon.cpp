#include "modules/optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "tensor/muon_update.hpp"

namespace gpt2 {

namespace {
std::vector<TensorInfo> adamw_tensors(const std::vector<TensorInfo>& tensors) {
  std::vector<TensorInfo> out;
  for (const TensorInfo& t : tensors)
    if (!block_matrix(t)) out.push_back(t);
  return out;
}
}  // namespace

Muon::Muon(const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg)
    : adamw_(std::make_unique<AdamW>(adamw_tensors(tensors), n, cfg)), cfg_(cfg), momentum_("muon_momentum", n),
      sumsq_("muon_sumsq", 1) {
  size_t wide = 0, square = 0;
  for (const TensorInfo& t : tensors) {
    if (!block_matrix(t)) continue;
    const int rows = int(t.shape[0]), cols = int(t.shape[1]);
    if (size_t(rows) * size_t(cols) != t.range.size())
      fail("muon: ", t.name(), " is not whole on this rank (", t.range.size(), " of ", rows, " x ", cols,
           " values): Muon needs parallel.zero = 0 and parallel.tp = 1");
    matrices_.push_back({t.range, rows, cols});
    const size_t m = size_t(std::min(rows, cols));
    wide = std::max(wide, t.range.size()), square = std::max(square, m * m);
  }
  x_ = Buffer<float>("muon_x", wide), y_ = Buffer<float>("muon_y", wide);
  a_ = Buffer<float>("muon_a", square), b_ = Buffer<float>("muon_b", square);
}

void Muon::step(Vec<float> params, Vec<float> grads, double lr, GradScale grad_scale, bool zero_grads,
                const WorkingCopy& copy) {
  // The schedule's fraction of train.lr, applied to Muon's own peak rate.
  const double muon_lr = cfg_.lr > 0 ? cfg_.muon_lr * lr / cfg_.lr : 0;
  const DeviceScalar sumsq(sumsq_.data());
  for (const Matrix& w : matrices_) {
    const size_t b = w.range.begin, n = w.range.size();
    const int m = std::min(w.rows, w.cols), wide = std::max(w.rows, w.cols);
    muon_momentum<float>(Vec<float>(grads.data() + b, n), Vec<float>(momentum_.data() + b, n), x_, w.rows, w.cols,
                         cfg_.muon_momentum, grad_scale);
    const Vec<float> o = newton_schulz5<float>(x_, y_, a_, b_, m, wide, cfg_.ns_steps, sumsq);
    const double shape_scale = std::sqrt(std::max(1.0, double(w.rows) / w.cols));
    muon_apply<float>(Vec<float>(params.data() + b, n), o, w.rows, w.cols, muon_lr, cfg_.weight_decay, shape_scale,
                      copy.slice(b, n));
  }
  adamw_->step(params, grads, lr, grad_scale, zero_grads, copy);  // (after: it zeroes the matrices' gradients)
}

std::vector<std::pair<std::string, Vec<float>>> Muon::state() {
  std::vector<std::pair<std::string, Vec<float>>> s = adamw_->state();
  s.push_back({"momentum", Vec<float>(momentum_.data(), momentum_.extent(0))});
  return s;
}

namespace {
[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"muon", "Muon (Newton-Schulz orthogonalised momentum) on the blocks' matrices, AdamW on the rest", 1,
     [](const std::vector<TensorInfo>& tensors, size_t n, const OptimizerConfig& cfg) -> std::unique_ptr<Optimizer> {
       return std::make_unique<Muon>(tensors, n, cfg);
     }});
}  // namespace

}  // namespace gpt2
