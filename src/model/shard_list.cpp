#include "model/shard_list.hpp"

namespace gpt2 {

std::vector<TensorShard> tensor_shards(const std::vector<TensorInfo>& tensors) {
  std::vector<TensorShard> out;
  out.reserve(tensors.size());
  for (const TensorInfo& t : tensors) {
    const ParamGroup g = block_matrix(t) ? ParamGroup::matrices : t.decay ? ParamGroup::decayed : ParamGroup::plain;
    out.push_back({t.name(), t.shape, {{0, t.shape[0]}}, t.range, g});
  }
  return out;
}

}  // namespace gpt2
