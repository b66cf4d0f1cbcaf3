#pragma once
// The model's tensors as the optimizer's list (plugins/tensor_shard.hpp): each with its parameter
// group, from a layout's tensors.
#include <vector>

#include "model/param_layout.hpp"
#include "plugins/tensor_shard.hpp"

namespace gpt2 {

// A layout's tensors (their ranges in the optimizer's buffers) as the optimizer's list.
std::vector<TensorShard> tensor_shards(const std::vector<TensorInfo>& tensors);

}  // namespace gpt2
