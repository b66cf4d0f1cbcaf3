#include "parallel/working_copies.hpp"

namespace gpt2 {

WorkingCopies::WorkingCopies(const StageLayout& layout, const ShardLayout& shards, Precision working, bool whole,
                             bool sharded16) {
  if (working == Precision::fp32) return;
  if (whole) {
    const size_t n = layout.local_size();
    whole_buf_ = uninitialized<uint16_t>("params16", n);
    whole_ = WorkingCopy{Vec<uint16_t>(whole_buf_.data(), n), working};
  }
  if (sharded16) {
    mixed_ = MixedGather(layout, shards);
    const size_t s = shards.shard_size();
    shard_buf_ = Buffer<uint16_t>("param_shard16", s);  // (zeroed: the gaps between tensors too)
    shard_ = WorkingCopy{Vec<uint16_t>(shard_buf_.data(), s), working};
  }
}

const uint16_t* WorkingCopies::whole_bits(CVec<float> params, size_t at) {
  if (whole_.empty()) return nullptr;
  if (whole_stale_) {
    write_working_copy(whole_, params);
    whole_stale_ = false;
  }
  return whole_.bits.data() + at;
}

void WorkingCopies::round_whole(CVec<float> params, Range r) {
  write_working_copy(whole_.slice(r.begin, r.size()), CVec<float>(params.data() + r.begin, r.size()));
}

const WorkingCopy& WorkingCopies::shard(CVec<float> shard) {
  if (shard_stale_) {
    write_working_copy(shard_, shard);
    shard_stale_ = false;
  }
  return shard_;
}

const WorkingCopy& WorkingCopies::optimizer_target(bool sharded) {
  shard_stale_ = false;
  if (!sharded) whole_stale_ = false;
  return sharded ? shard_ : whole_;
}

size_t WorkingCopies::bytes() const {
  return (whole_buf_.extent(0) + shard_buf_.extent(0)) * sizeof(uint16_t) + mixed_.memory();
}

}  // namespace gpt2
