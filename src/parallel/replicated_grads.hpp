#pragma once
// Sequence parallelism's replicated tensors (LayerNorms, the row-parallel biases, wpe): each tp rank
// holds them whole but computes their gradients from its own rows, partial sums that one packed
// all-reduce over tp adds up (in the shard, after the data-parallel reduction).
#include <utility>
#include <vector>

#include "parallel/shard_layout.hpp"
#include "plugins/communicator.hpp"
#include "trace/tracer.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

class ReplicatedGrads {
 public:
  ReplicatedGrads(const StageLayout& layout, const ShardLayout& shards);  // (its buffer made now)
  // Sums them in grad_shard over tp (nothing when tp is 1 or there are none).
  void sync(Communicator& tp, float* grad_shard, Tracer& tracer, int step);
  bool touches(Range shard_range) const;  // a unit whose gradient sync changes

 private:
  std::vector<std::pair<size_t, size_t>> ranges_;  // shard ranges
  Buffer<float> packed_;
};

}  // namespace gpt2
