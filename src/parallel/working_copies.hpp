#pragma once
// The 16-bit working copies of a ParamStore under mixed precision (bf16 / fp16; none in fp32): of the
// whole parameters, which the GEMMs read where the store keeps them whole (ZeRO 0-2); and, sharded
// with 16-bit gathers, of the shard, which the optimizer writes in its pass and the gathers send
// (parallel/mixed_gather). A copy is stale once anything but that pass or a 16-bit gather wrote the
// values it mirrors; it is rounded again at its next use.
#include <cstdint>

#include "parallel/mixed_gather.hpp"
#include "tensor/working_copy.hpp"

namespace gpt2 {

class WorkingCopies {
 public:
  WorkingCopies() = default;
  // whole: the store keeps whole parameters; sharded16: they are sharded and gathered in 16 bits.
  WorkingCopies(const StageLayout& layout, const ShardLayout& shards, Precision working, bool whole, bool sharded16);

  MixedGather& mixed() { return mixed_; }
  const MixedGather& mixed() const { return mixed_; }
  // The whole copy's bits from `at`, rounded from params first if stale; nullptr without one.
  const uint16_t* whole_bits(CVec<float> params, size_t at);
  uint16_t* whole_at(size_t at) { return whole_.bits.data() + at; }  // where a 16-bit gather writes
  void round_whole(CVec<float> params, Range r);  // that range of the whole copy, from params now
  const WorkingCopy& shard(CVec<float> shard);    // the shard's copy, rounded first if stale
  // What the optimizer's pass writes beside the masters (the shard's copy when the update is
  // sharded, else the whole one), fresh after it.
  const WorkingCopy& optimizer_target(bool sharded);
  void gathered(bool in_16_bits) { whole_stale_ = !in_16_bits; }  // the whole parameters were gathered
  void all_stale() { whole_stale_ = shard_stale_ = true; }
  size_t bytes() const;

 private:
  WorkingCopy whole_, shard_;
  Buffer<uint16_t> whole_buf_, shard_buf_;
  bool whole_stale_ = true, shard_stale_ = true;
  MixedGather mixed_;
};

}  // namespace gpt2
