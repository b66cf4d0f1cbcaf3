#pragma once
// ZeRO's parameter all-gather under mixed precision (bf16 / fp16). The GEMMs read only the weights'
// 16-bit working copy, so the matrices of a block and of the LM head's tied wte travel as their
// 16-bit values, half the bytes of fp32, gathered from the shard's own copy (the optimizer writes
// it in its pass over the shard). The tensors a stage reads in fp32, a block's LayerNorms and
// biases, go beside them in fp32. Which of those fall in a rank's piece of a bucket differs from rank
// to rank and an all-gather takes one count, so each rank packs its part into a buffer as large as
// the largest rank's part, and every rank unpacks all of them. The units the embedding reads (wte,
// wpe) and the final LayerNorm are gathered whole in fp32 by the caller (sixteen_bit() is false).
#include <cstdint>
#include <vector>

#include "parallel/shard_layout.hpp"
#include "plugins/communicator.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// The units whose matrices travel as 16-bit values: a block, and the LM head's tied wte (the rest
// -- wte and wpe, which the embedding reads, and the final LayerNorm -- are gathered in fp32).
inline bool gathered_in_16_bits(UnitKind k) { return k == UnitKind::block || k == UnitKind::tied_wte; }

class MixedGather {
 public:
  MixedGather() = default;  // inactive: every unit gathers in fp32
  MixedGather(const StageLayout& layout, const ShardLayout& shards);

  bool active() const { return !sixteen_bit_.empty(); }
  bool sixteen_bit(int unit) const { return active() && sixteen_bit_[size_t(unit)]; }
  // Issues bucket b's all-gathers (its unit sixteen_bit): the pieces of `shard16`, the shard's 16-bit
  // copy, into whole16 (the bucket's first value), and this rank's fp32 values of `shard32` packed.
  void start(int b, Communicator& dp, const uint16_t* shard16, const float* shard32, uint16_t* whole16,
             std::vector<Request>& pending);
  size_t bytes(int b) const;  // what start(b)'s gathers deliver to each rank
  // Once start(b)'s requests are complete: every rank's fp32 values into whole32 (the bucket's first value).
  void finish(int b, float* whole32);
  size_t memory() const;  // bytes of the index tables and packing buffers

 private:
  struct Plan {
    size_t shard_offset = 0, piece = 0, size = 0;  // the bucket's (ShardLayout's Bucket)
    size_t count = 0;   // fp32 values a rank sends: the largest rank's part (0: none in the bucket)
    size_t pack = 0;    // where this rank's pack indices (count) and send buffer (count) start
    size_t unpack = 0;  // where the unpack targets (ranks x count) and receive buffer start
  };
  int ranks_ = 1;
  std::vector<char> sixteen_bit_;  // per unit
  std::vector<Plan> plans_;        // per bucket
  Buffer<int32_t> pack_at_, unpack_to_;  // relative to the piece's / bucket's first value; -1: padding
  Buffer<float> send_, recv_;
};

}  // namespace gpt2
