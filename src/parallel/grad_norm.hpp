#pragma once
// A rank's part of the squared gradient norm, over its shard (parallel/shard_layout): every tensor
// but the tied copy (stage 0 counts wte), the tensors replicated over tp on tp rank 0 only. The shard
// is cut into chunks that start at every tensor and never cross a unit's end, so a unit's chunks are
// summed as soon as its gradient is final, and a tensor's as soon as its values are (the product that
// writes it last, on one rank: region_final), while they are in cache. A unit that changes after its
// reduction (the tied wte, sequence parallelism's replicated tensors) is deferred to the end, from then
// on. The chunks' sum is in a fixed order: the same norm whatever was summed first.
#include <utility>
#include <vector>

#include "core/range.hpp"
#include "parallel/shard_layout.hpp"
#include "tensor/reduce.hpp"

namespace gpt2 {

// The shard ranges of the tensors a rank counts in the norm (replicated_only: of those replicated
// over tp, when tp > 1), neighbours merged (merge) or one a tensor.
std::vector<std::pair<size_t, size_t>> counted_ranges(const StageLayout& layout, const ShardLayout& shards,
                                                      bool replicated_only, bool merge = true);

class GradNorm {
 public:
  GradNorm(const StageLayout& layout, const ShardLayout& shards);
  void begin_step();                        // nothing summed yet
  // Values r (shard offsets) of unit u hold their final values for this step before the rest of u:
  // the chunks inside r now, unless u is deferred. written_again: a writer of r after that.
  void region_final(int u, Range r, CVec<float> grads);
  void written_again(int u, Range r);
  void unit_final(int u, CVec<float> grads);  // u's gradient is final: its chunks now, unless deferred
  void defer(int u);                        // u changes after its reduction: summed at the end
  void total(CVec<float> grads, DeviceScalar out);  // the units not summed yet, and the total

 private:
  void sum(int u, CVec<float> grads);  // u's chunks not summed yet
  std::pair<int64_t, int64_t> chunks_in(int u, Range r) const;  // u's chunks inside r: [first, last)
  ChunkTable chunks_;
  std::vector<std::pair<int64_t, int64_t>> unit_chunks_;  // each unit's chunks [first, last)
  std::vector<char> summed_, deferred_;
  std::vector<char> chunk_summed_;  // by region_final, this step
};

}  // namespace gpt2
