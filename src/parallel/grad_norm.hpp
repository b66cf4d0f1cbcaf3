#pragma once
// A rank's part of the squared gradient norm, over its shard (parallel/shard_layout): every tensor
// but the tied copy (stage 0 counts wte), the tensors replicated over tp on tp rank 0 only. The shard
// is cut into chunks that never cross a unit's end, so a unit's chunks are summed as soon as its
// gradient is final (while it is in cache); a unit that changes after its reduction (the tied wte,
// sequence parallelism's replicated tensors) is deferred to the end, from then on. The chunks' sum
// is in a fixed order: the same norm whatever completed first.
#include <utility>
#include <vector>

#include "parallel/shard_layout.hpp"
#include "tensor/reduce.hpp"

namespace gpt2 {

// The shard ranges of the tensors a rank counts in the norm (replicated_only: of those replicated
// over tp, when tp > 1), neighbours merged.
std::vector<std::pair<size_t, size_t>> counted_ranges(const StageLayout& layout, const ShardLayout& shards,
                                                      bool replicated_only);

class GradNorm {
 public:
  GradNorm(const StageLayout& layout, const ShardLayout& shards);
  void begin_step();                        // nothing summed yet
  void unit_final(int u, CVec<float> grads);  // u's gradient is final: its chunks now, unless deferred
  void defer(int u);                        // u changes after its reduction: summed at the end
  void total(CVec<float> grads, DeviceScalar out);  // the units not summed yet, and the total

 private:
  void sum(int u, CVec<float> grads);
  ChunkTable chunks_;
  std::vector<std::pair<int64_t, int64_t>> unit_chunks_;  // each unit's chunks [first, last)
  std::vector<char> summed_, deferred_;
};

}  // namespace gpt2
