#pragma once
// The part of the flat parameter buffer one rank holds, cut into units. A rank holds one pipeline
// stage -- a contiguous range of blocks -- or, with interleaved and V schedules, several (chunks,
// each a virtual stage), plus the embeddings when a chunk starts at block 0 and the final LayerNorm
// + LM head when one ends at the last block. Its local buffer is, in order:
//   [tied wte copy]  a rank with the head but not the embedding: the LM head's copy of wte, kept
//                    equal to the embedding's by summing the two gradient contributions every step
//   [wte] [wpe]      a rank with the embedding (its LM head, if it has one, uses this wte)
//   the blocks of each chunk, chunk by chunk
//   [final norm]     a rank with the head (lnfw, lnfb)
// With ZeRO over D ranks the tensors inside a unit go by row length, longest first (a block's
// matrices, then its vectors: a vector's rows are its values); a run of tensors with one row length
// is a segment, padded at its end to a multiple of D rows (the padding belongs to no tensor and stays
// 0), so the shard plan (parallel/shard_layout.hpp) can deal out whole rows. Without, a unit keeps
// the global order and is one segment of values.
// Units are what the stage asks its UnitStore for one at a time (a block's twelve tensors, ...): the
// grain of gradient buckets, of ZeRO shards and of parameter gathers. With one stage and no tied
// copy, local == global.
//
// Tensor parallelism (Megatron's split over tp ranks) keeps a part of most tensors: the column-
// parallel linears (qkv, with the heads divided; fc) a block of output rows and of their bias, the
// row-parallel ones (attention and MLP projections) a block of input columns of every row, wte
// (vocabulary-parallel) a block of rows; LayerNorms, the row-parallel biases and wpe are replicated.
#include <functional>
#include <vector>

#include "model/param_layout.hpp"

namespace gpt2 {

enum class UnitKind { tied_wte, wte, wpe, block, final_norm };

struct Unit {
  UnitKind kind;
  int layer;    // block index, -1 otherwise
  Range range;  // in the local buffer
  // The phase whose last contribution completes the unit's gradient in a microbatch: the LM head's
  // copy of wte gets its gradient in the head's forward (loss backward runs there), the rest in
  // backward.
  bool grads_final_in_forward() const { return kind == UnitKind::tied_wte; }
  const char* name() const;
};

// Consecutive tensors of a unit with one row length (values a row; 1 for vectors, and for the
// values of an unsharded unit).
struct RowSegment {
  int unit;
  Range range;  // in the local buffer, its padding included
  size_t row_len;
};

// Values in one row of a tensor: the product of its shape after the first dimension.
inline size_t row_length(const TensorInfo& t) {
  size_t n = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) n *= t.shape[i];
  return n;
}

struct TpSplit {
  int size = 1, rank = 0;  // tensor-parallel ranks, and this one
};

struct BlockRange {
  int first = 0, end = 0;  // blocks [first, end)
};

class StageLayout {
 public:
  // shard_ranks: the ranks ZeRO shares the buffer over (each segment padded to whole rows for all).
  StageLayout(const ParamLayout& global, int first_layer, int end_layer, TpSplit tp = {})
      : StageLayout(global, std::vector<BlockRange>{{first_layer, end_layer}}, tp) {}
  StageLayout(const ParamLayout& global, std::vector<BlockRange> chunks, TpSplit tp = {}, size_t shard_ranks = 1);

  const ParamLayout& global() const { return *global_; }
  const TpSplit& tp() const { return tp_; }
  int vocab_begin() const;   // first row of wte this rank holds
  int local_vocab() const;   // rows of wte it holds (padded vocabulary / tp)
  const std::vector<BlockRange>& chunks() const { return chunks_; }
  int first_layer() const { return chunks_.front().first; }  // of the first chunk
  int end_layer() const { return chunks_.back().end; }       // of the last chunk
  bool has_embedding() const { return embedding_; }
  bool has_head() const { return head_; }

  size_t tied_size() const { return tied_; }   // wte copy at local offset 0, or 0
  size_t local_size() const { return size_; }
  size_t shard_ranks() const { return shard_ranks_; }

  // Tensors this stage holds, with `range` rewritten to local offsets (tied wte first if any);
  // `global` says where each one's elements are in the global layout.
  const std::vector<TensorInfo>& tensors() const { return local_; }
  const TensorInfo& tensor(Param kind, int layer = -1) const;
  // Local range of block `layer`'s unit (must belong to this stage).
  Range block(int layer) const;

  const std::vector<Unit>& units() const { return units_; }
  const std::vector<RowSegment>& segments() const { return segments_; }  // in local order
  int unit_index(UnitKind kind, int layer = -1) const;  // -1 when the stage has no such unit
  // The unit whose wte the LM head uses: the tied copy, or wte itself on a one-stage model.
  int head_wte_unit() const;

 private:
  void place_unit(UnitKind kind, int layer, std::vector<TensorInfo> ts, size_t shard_ranks);

  const ParamLayout* global_;
  std::vector<BlockRange> chunks_;
  TpSplit tp_;
  bool embedding_ = false, head_ = false;
  size_t tied_ = 0, size_ = 0, shard_ranks_ = 1;
  std::vector<TensorInfo> local_;
  std::vector<Unit> units_;
  std::vector<RowSegment> segments_;
};

// Segments of a block of `model` on a tp rank of `tp`, with ZeRO over `shard_ranks` (the planner's).
int block_segments(const ModelConfig& model, int tp, size_t shard_ranks);

// Moving a local buffer's values to and from the global layout, tensor by tensor along their
// GlobalMaps (checkpoints, gathers). local_to_global leaves the tied copy out (stage 0 owns wte);
// global_to_local fills it like wte. `read(begin, n, dst)` reads global floats [begin, begin + n).
// With tensor parallelism, local_to_global writes replicated tensors from tp rank 0 only.
void local_to_global(const StageLayout& layout, const float* local, float* global);
void global_to_local(const StageLayout& layout, const std::function<void(size_t, size_t, float*)>& read,
                     float* local);

}  // namespace gpt2
