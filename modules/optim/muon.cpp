#include "modules/optim/muon.hpp"

#include <algorithm>
#include <cmath>

#include "tensor/muon_update.hpp"

namespace gpt2 {

namespace {
std::vector<TensorShard> adamw_tensors(const std::vector<TensorShard>& tensors) {
  std::vector<TensorShard> out;
  for (const TensorShard& t : tensors)
    if (t.group != ParamGroup::matrices) out.push_back(t);
  return out;
}

// Without shards every block matrix is whole in the buffer, and this rank owns it.
std::vector<MatrixShards::Matrix> whole_matrices(const std::vector<TensorShard>& tensors) {
  std::vector<MatrixShards::Matrix> out;
  for (const TensorShard& t : tensors) {
    if (t.group != ParamGroup::matrices) continue;
    const int rows = int(t.shape[0]), cols = int(t.shape[1]);
    if (!t.whole())
      fail("muon: ", t.name, " is not whole on this rank (", t.run.size(), " of ", rows, " x ", cols,
           " values) and no shard plan says where its parts are");
    out.push_back({rows, cols, t.run, true, 0});
  }
  return out;
}

Vec<float> slice(float* p, Range r) { return Vec<float>(p + r.begin, r.size()); }
}  // namespace

Muon::Muon(const std::vector<TensorShard>& tensors, size_t n, const OptimizerConfig& cfg, MatrixShards* shards)
    : shards_(shards),
      matrices_(shards ? shards->matrices() : whole_matrices(tensors)),
      others_(adamw_tensors(tensors)),
      adamw_(std::make_unique<AdamW>(n, cfg)),
      cfg_(cfg),
      momentum_("muon_momentum", n) {
  ns_.sumsq = Buffer<double>("muon_sumsq", 1);
  size_t wide = 0, square = 0;
  for (const Matrix& w : matrices_) {
    if (!w.owned) continue;
    const size_t m = size_t(std::min(w.rows, w.cols));
    wide = std::max(wide, size_t(w.rows) * size_t(w.cols)), square = std::max(square, m * m);
  }
  if (shards_) {
    updates_ = Buffer<float>("muon_updates", n);
    owned_ = Buffer<float>("muon_owned", shards_->owned_size());
  } else {
    ns_.x = Buffer<float>("muon_x", wide);
  }
  ns_.y = Buffer<float>("muon_y", wide);
  ns_.a = Buffer<float>("muon_a", square), ns_.b = Buffer<float>("muon_b", square);
  if (cfg.ns_bf16) {
    ns_.x16 = Buffer<bf16>("muon_x16", wide), ns_.a16 = Buffer<bf16>("muon_a16", square);
    ns_.b16 = Buffer<bf16>("muon_b16", square);
    ns_.low = {Vec<bf16>(ns_.x16.data(), wide), Vec<bf16>(ns_.a16.data(), square), Vec<bf16>(ns_.b16.data(), square)};
    gemm_lowp_reserve(true, wide);  // (where bf16 products convert: their copies made now)
  }
}

void Muon::orthogonalise(float* x, const Matrix& w) {
  const size_t n = size_t(w.rows) * size_t(w.cols);
  const Vec<float> xv(x, n);
  const Vec<float> o =
      newton_schulz5<float>(xv, ns_.y, ns_.a, ns_.b, w.rows, w.cols, cfg_.ns_steps, DeviceScalar(ns_.sumsq.data()), ns_.low);
  if (o.data() != x) Kokkos::deep_copy(ExecSpace(), xv, Vec<float>(o.data(), n));
}

void Muon::apply(Vec<float> params, const float* o, const Matrix& w, double lr, const WorkingCopy& copy) {
  const double shape_scale = std::sqrt(std::max(1.0, double(w.rows) / w.cols));
  muon_apply<float>(slice(params.data(), w.run), Vec<const float>(o, w.run.size()), lr, cfg_.weight_decay,
                    shape_scale, copy.slice(w.run.begin, w.run.size()));
}

void Muon::step(const StepTensors& t, const StepSettings& s) {
  // The schedule's fraction of train.lr, applied to Muon's own peak rate.
  const double muon_lr = cfg_.lr > 0 ? cfg_.muon_lr * s.lr / cfg_.lr : 0;
  const Vec<float> params = t.params;
  const WorkingCopy& copy = t.copy;
  auto momentum = [&](const Matrix& w, float* u) {
    muon_momentum<float>(slice(t.grads.data(), w.run), slice(momentum_.data(), w.run),
                         Vec<float>(u, w.run.size()), cfg_.muon_momentum, s.grad_scale);
  };
  if (!shards_) {  // one matrix at a time, in one workspace
    for (const Matrix& w : matrices_) {
      momentum(w, ns_.x.data());
      orthogonalise(ns_.x.data(), w);
      apply(params, ns_.x.data(), w, muon_lr, copy);
    }
  } else {  // every update to its owner, the owners' results back, all at once
    for (const Matrix& w : matrices_) momentum(w, updates_.data() + w.run.begin);
    shards_->gather(updates_.data(), owned_.data());
    for (const Matrix& w : matrices_)
      if (w.owned) orthogonalise(owned_.data() + w.at, w);
    shards_->scatter(owned_.data(), updates_.data());
    for (const Matrix& w : matrices_) apply(params, updates_.data() + w.run.begin, w, muon_lr, copy);
  }
  adamw_->step({others_, t.params, t.grads, t.copy}, s);  // (after: it zeroes the matrices' gradients)
}

std::vector<std::pair<std::string, Vec<float>>> Muon::state() {
  std::vector<std::pair<std::string, Vec<float>>> s = adamw_->state();
  s.push_back({"momentum", Vec<float>(momentum_.data(), momentum_.extent(0))});
  return s;
}

namespace {
[[maybe_unused]] const bool registered = OptimizerRegistry::add(
    {"muon", "Muon (Newton-Schulz orthogonalised momentum) on the blocks' matrices, AdamW on the rest", 1,
     [](const std::vector<TensorShard>& tensors, size_t n, const OptimizerConfig& cfg,
        MatrixShards* shards) -> std::unique_ptr<Optimizer> { return std::make_unique<Muon>(tensors, n, cfg, shards); },
     true});
}  // namespace

}  // namespace gpt2
