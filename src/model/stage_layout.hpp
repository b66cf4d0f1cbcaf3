#pragma once
// The part of the flat parameter buffer one pipeline stage holds. A stage is a contiguous range of
// blocks, plus the embeddings on the first stage and the final LayerNorm + LM head on the last.
// Its local buffer is the global range it owns, preceded -- on a last stage that is not also the
// first -- by a copy of wte for the tied LM head (kept equal to stage 0's by summing the two
// gradient contributions every step). With one stage, local == global.
#include <vector>

#include "model/param_layout.hpp"

namespace gpt2 {

class StageLayout {
 public:
  StageLayout(const ParamLayout& global, int first_layer, int end_layer);

  const ParamLayout& global() const { return *global_; }
  int first_layer() const { return first_; }
  int end_layer() const { return end_; }
  bool has_embedding() const { return first_ == 0; }
  bool has_head() const { return end_ == global_->config().n_layer; }

  Range owned() const { return owned_; }       // global range (checkpoint shard)
  size_t tied_size() const { return tied_; }   // wte copy at local offset 0, or 0
  size_t local_size() const { return tied_ + owned_.size(); }

  // Tensors this stage holds, with `range` rewritten to local offsets (tied wte first if any).
  const std::vector<TensorInfo>& tensors() const { return local_; }
  const TensorInfo& tensor(Param kind, int layer = -1) const;
  // Local range of block `layer` (must belong to this stage).
  Range block(int layer) const;

 private:
  const ParamLayout* global_;
  int first_, end_;
  Range owned_;
  size_t tied_ = 0;
  std::vector<TensorInfo> local_;
};

}  // namespace gpt2
