#include "parallel/replicated_grads.hpp"

#include "parallel/grad_norm.hpp"

namespace gpt2 {

ReplicatedGrads::ReplicatedGrads(const StageLayout& layout, const ShardLayout& shards)
    : ranges_(counted_ranges(layout, shards, true)) {
  size_t n = 0;
  for (const auto& r : ranges_) n += r.second - r.first;
  if (layout.tp().size > 1 && n) packed_ = Buffer<float>("replicated_grads", n);
}

void ReplicatedGrads::sync(Communicator& tp, float* grad_shard, Tracer& tracer, int step) {
  if (tp.size() == 1 || ranges_.empty()) return;
  const size_t n = packed_.extent(0);
  auto each = [&](bool pack) {
    size_t at = 0;
    for (const auto& r : ranges_) {
      const size_t len = r.second - r.first;
      const Vec<float> shard(grad_shard + r.first, len), packed(packed_.data() + at, len);
      if (pack) Kokkos::deep_copy(ExecSpace(), packed, shard);
      else Kokkos::deep_copy(ExecSpace(), shard, packed);
      at += len;
    }
  };
  each(true);
  {
    Tracer::Scope t(tracer, EventKind::tp_collective, step, -1, n * sizeof(float) * 2);
    tp.allreduce(packed_.data(), n, DType::f32, ReduceOp::sum);
  }
  each(false);
}

bool ReplicatedGrads::touches(Range ur) const {
  for (const auto& r : ranges_)
    if (r.first < ur.end && r.second > ur.begin) return true;
  return false;
}

}  // namespace gpt2
