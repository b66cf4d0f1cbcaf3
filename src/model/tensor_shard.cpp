#include "model/tensor_shard.hpp"

namespace gpt2 {

size_t TensorShard::size() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

std::vector<TensorShard> tensor_shards(const std::vector<TensorInfo>& tensors) {
  std::vector<TensorShard> out;
  out.reserve(tensors.size());
  for (const TensorInfo& t : tensors) {
    const ParamGroup g = block_matrix(t) ? ParamGroup::matrices : t.decay ? ParamGroup::decayed : ParamGroup::plain;
    out.push_back({t.name(), t.shape, t.range, g});
  }
  return out;
}

}  // namespace gpt2
