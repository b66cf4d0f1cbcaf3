#include "parallel/mixed_gather.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "parallel/index_table.hpp"
#include "tensor/indexed_copy.hpp"

namespace gpt2 {

namespace {
// The matrices only GEMMs read: a block's four, and wte in the tied copy (the LM head's alone).
bool gemm_only(const TensorInfo& t, UnitKind unit) {
  switch (t.kind) {
    case Param::qkvw: case Param::attprojw: case Param::fcw: case Param::fcprojw: return true;
    case Param::wte: return unit == UnitKind::tied_wte;
    default: return false;
  }
}

}  // namespace

MixedGather::MixedGather(const StageLayout& layout, const ShardLayout& shards) : ranks_(shards.ranks()) {
  const auto& units = layout.units();
  sixteen_bit_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    sixteen_bit_[u] = gathered_in_16_bits(units[u].kind);
  const size_t D = size_t(shards.ranks());
  std::vector<int32_t> pack, unpack;
  plans_.resize(shards.buckets().size());
  for (size_t id = 0; id < plans_.size(); ++id) {
    const Bucket& b = shards.buckets()[id];
    if (!sixteen_bit_[size_t(b.unit)]) continue;
    const size_t part = b.piece.size(), me = (b.piece.begin - b.range.begin) / part;
    if (b.range.size() > size_t(INT32_MAX)) fail("MixedGather: a bucket of ", b.range.size(), " values is too large");
    // Each rank's fp32 values in the bucket, relative to the bucket's first value.
    std::vector<std::vector<int32_t>> of(D);
    for (const TensorInfo& t : layout.tensors()) {
      if (gemm_only(t, units[size_t(b.unit)].kind)) continue;
      const size_t lo = std::max(t.range.begin, b.range.begin), hi = std::min(t.range.end, b.range.end);
      for (size_t i = lo; i < hi; ++i) of[(i - b.range.begin) / part].push_back(int32_t(i - b.range.begin));
    }
    Plan& p = plans_[id];
    p.shard_offset = b.shard_offset, p.piece = part, p.size = b.range.size();
    for (const auto& r : of) p.count = std::max(p.count, r.size());
    if (!p.count) continue;
    p.pack = pack.size(), p.unpack = unpack.size();
    for (size_t j = 0; j < p.count; ++j)  // padding reads the piece's first value; nobody unpacks it
      pack.push_back(j < of[me].size() ? of[me][j] - int32_t(me * part) : 0);
    for (const auto& r : of)
      for (size_t j = 0; j < p.count; ++j) unpack.push_back(j < r.size() ? r[j] : -1);
  }
  pack_at_ = index_table("gather_pack_at", pack);
  unpack_to_ = index_table("gather_unpack_to", unpack);
  send_ = Buffer<float>("gather_send", pack.size());
  recv_ = Buffer<float>("gather_recv", unpack.size());
}

void MixedGather::start(int id, Communicator& dp, const uint16_t* shard16, const float* shard32, uint16_t* whole16,
                        std::vector<Request>& pending) {
  const Plan& p = plans_[size_t(id)];
  // bf16 names the 2-byte element: fp16 bits travel alike (an all-gather only moves them).
  pending.push_back(dp.iall_gather(shard16 + p.shard_offset, whole16, p.piece, DType::bf16));
  if (!p.count) return;
  const Vec<float> send(send_.data() + p.pack, p.count);
  pack_at<float>(send, CVec<float>(shard32 + p.shard_offset, p.piece),
                 CVec<int32_t>(pack_at_.data() + p.pack, p.count));
  pending.push_back(dp.iall_gather(send.data(), recv_.data() + p.unpack, p.count, DType::f32));
}

size_t MixedGather::bytes(int id) const {
  const Plan& p = plans_[size_t(id)];
  return p.size * sizeof(uint16_t) + p.count * size_t(ranks_) * sizeof(float);
}

void MixedGather::finish(int id, float* whole32) {
  const Plan& p = plans_[size_t(id)];
  if (!p.count) return;
  const size_t n = p.count * size_t(ranks_);
  unpack_to<float>(Vec<float>(whole32, p.size), CVec<float>(recv_.data() + p.unpack, n),
                   CVec<int32_t>(unpack_to_.data() + p.unpack, n));
}

size_t MixedGather::memory() const {
  return (pack_at_.extent(0) + unpack_to_.extent(0)) * sizeof(int32_t) + (send_.extent(0) + recv_.extent(0)) * sizeof(float);
}

}  // namespace gpt2
