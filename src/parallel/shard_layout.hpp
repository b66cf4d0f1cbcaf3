#pragma once
// The shard plan: which rows of each tensor each rank of a data-parallel group of D owns. The rows of
// a segment (StageLayout: a unit's tensors of one row length, padded to a multiple of D rows) are cut
// from the segment's end into gradient buckets of a multiple of D rows each (about bucket_elems
// values; the last bucket cut, the segment's first, may be smaller); rank r owns the r-th D-th of
// every bucket, its piece: whole rows of the block's matrices, of an embedding, or values of the
// vectors (a vector's rows are its values). Splits need not divide: a tensor's last rows may fall
// to fewer ranks, the padding to the others. Buckets only group the communication (one reduce-
// scatter or all-gather each, equal pieces). A rank's shard is its pieces in local order, one
// contiguous buffer: the optimizer state, the sharded gradient and (ZeRO-3) the parameters live
// there, each tensor's rows one run of it. Because the plan depends only on the segments' shapes,
// equal units -- stage 0's wte and the last stage's tied copy -- are shared out alike, so the tied
// gradient can be summed piece by piece. Without sharding (D = 1) a piece is its bucket and the
// shard is the whole buffer.
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
  // Every segment must hold a multiple of D rows (the trainer's layout pads them so).
  ShardLayout(const StageLayout& layout, int dp_size, int dp_rank, size_t bucket_elems);

  int ranks() const { return D_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<int>& buckets_of(int unit) const { return by_unit_[size_t(unit)]; }
  size_t shard_size() const { return shard_; }
  Range shard_range(int unit) const;  // the unit's pieces, consecutive in the shard
  // The rows of local tensor t that rank q of the D owns, ascending, neighbours merged: its part of
  // the tensor is those rows, one after another in q's shard.
  std::vector<Range> rows_of(const TensorInfo& t, int q) const;
  // This rank's parts of the layout's tensors in shard coordinates, one run each; kind, layer,
  // decay and the whole tensor's shape kept. Without sharding, the layout's tensors themselves.
  const std::vector<TensorInfo>& shard_tensors() const { return shard_tensors_; }
  // The same as the optimizer's list: each tensor's run in the shard, the rows it holds, the whole
  // tensor's shape, its group.
  const std::vector<TensorShard>& optimizer_shards() const { return optimizer_shards_; }

 private:
  void cut_segment(const RowSegment& s, size_t bucket_elems);
  void add_tensor_parts(const StageLayout& layout, const Bucket& b);

  int D_, me_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> by_unit_;
  std::vector<TensorInfo> shard_tensors_;
  std::vector<TensorShard> optimizer_shards_;
  size_t shard_ = 0;
};

}  // namespace gpt2
