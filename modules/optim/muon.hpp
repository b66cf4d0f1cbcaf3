#pragma once
// Muon for the blocks' matrices (qkv, attention projection, fc, fc projection), AdamW for everything
// else (embeddings and the tied head, biases, LayerNorms): train.optimizer = "muon". Each matrix:
// momentum with Nesterov (train.muon_momentum), the Newton-Schulz quintic (train.ns_steps) on its
// Frobenius-normalised update in fp32, the update scaled by max(1, rows / cols)^0.5, decoupled weight
// decay; its rate is train.muon_lr times the schedule's fraction of train.lr. Momentum and the step
// are element-wise, on whatever part of a matrix the rank holds; the Newton-Schulz iteration runs on
// the whole matrix, at its owner (MatrixShards) when the ranks hold parts (ZeRO, tensor parallelism).
#include <memory>

#include "plugins/optimizer.hpp"
#include "modules/optim/adamw.hpp"
#include "tensor/muon_update.hpp"

namespace gpt2 {

class Muon final : public Optimizer {
 public:
  // shards: where the ranks hold parts of the matrices (null: each matrix is whole in the buffer).
  Muon(const std::vector<TensorShard>& tensors, size_t n, const OptimizerConfig& cfg, MatrixShards* shards);
  std::string name() const override { return "muon"; }
  void step(const StepTensors& tensors, const StepSettings& s) override;
  int64_t steps_taken() const override { return adamw_->steps_taken(); }
  void set_steps_taken(int64_t n) override { adamw_->set_steps_taken(n); }
  std::vector<std::pair<std::string, Vec<float>>> state() override;

 private:
  using Matrix = MatrixShards::Matrix;
  void orthogonalise(float* x, const Matrix& w);  // in place: x (rows x cols) -> its Newton-Schulz image
  void apply(Vec<float> params, const float* o, const Matrix& w, double lr, const WorkingCopy& copy);

  MatrixShards* shards_;
  std::vector<Matrix> matrices_;
  std::vector<TensorShard> others_;  // AdamW's: every group but the matrices
  std::unique_ptr<AdamW> adamw_;     // (it also zeroes the matrices' gradients: it covers none of them)
  OptimizerConfig cfg_;
  Buffer<float> momentum_;        // the parameter layout (0 outside the matrices)
  Buffer<float> updates_;         // with shards: the updates' runs (the parameter layout), then the results
  Buffer<float> owned_;           // with shards: the owned matrices, whole
  struct Workspaces {       // Newton-Schulz's, sized for the largest matrix
    Buffer<float> x, y, a, b;
    Buffer<bf16> x16, a16, b16;  // train.ns_dtype = "bf16": the products' inputs
    NewtonSchulzLowp low;
    Buffer<double> sumsq;
  } ns_;
};

}  // namespace gpt2
