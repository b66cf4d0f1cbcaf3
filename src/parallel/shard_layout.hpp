#pragma once
// How a rank's local buffer is cut into gradient buckets and, under ZeRO, shared out over the D
// ranks of its data-parallel group. Buckets never cross a unit (StageLayout::units), are cut from
// each unit's end (a unit's gradient is complete at once, and small buckets let MPI make progress
// between blocks) and hold a multiple of D elements; rank r owns the r-th D-th of every bucket, its
// piece. A rank's shard is its pieces in local order, one contiguous buffer: the optimizer state,
// the sharded gradient and (ZeRO-3) the parameters live there. Because buckets depend only on a
// unit's size, equal units -- stage 0's wte and the last stage's tied copy -- are shared out alike,
// so the tied gradient can be summed piece by piece. Without sharding (D = 1) a piece is its
// bucket and the shard is the whole buffer.
#include <string>
#include <vector>

#include "model/stage_layout.hpp"
#include "model/shard_list.hpp"

namespace gpt2 {

struct Bucket {
  int unit;
  Range range;          // local
  Range piece;          // local: this rank's part of it
  size_t shard_offset;  // where the piece sits in the shard
};

class ShardLayout {
 public:
  // Every unit's size must be a multiple of D (the trainer's layout pads them so).
  ShardLayout(const StageLayout& layout, int dp_size, int dp_rank, size_t bucket_elems);

  int ranks() const { return D_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<int>& buckets_of(int unit) const { return by_unit_[size_t(unit)]; }
  size_t shard_size() const { return shard_; }
  Range shard_range(int unit) const;  // the unit's pieces, consecutive in the shard
  // The layout's tensors cut to this rank's pieces, in shard coordinates, one run each (a tensor's
  // parts in consecutive pieces sit one after another in the shard); kind, layer, decay and the
  // whole tensor's shape kept. Without sharding, the layout's tensors themselves.
  const std::vector<TensorInfo>& shard_tensors() const { return shard_tensors_; }
  // The same as the optimizer's list: each tensor's run in the shard, its whole shape, its group.
  const std::vector<TensorShard>& optimizer_shards() const { return optimizer_shards_; }

 private:
  int D_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> by_unit_;
  std::vector<TensorInfo> shard_tensors_;
  std::vector<TensorShard> optimizer_shards_;
  size_t shard_ = 0;
};

}  // namespace gpt2
