// The two homes of a ParamStore's parameters (parallel/param_source.hpp) and the bucket all-gather
// both use.
#include "parallel/param_source.hpp"

#include <algorithm>
#include <map>

#include "model/param_init.hpp"

namespace gpt2 {

namespace {
using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

// Bucket id's all-gather from the shard into `whole` (fp32) or, when whole16 is set, into whole16
// (its 16-bit matrices) with `whole`'s fp32 tensors (MixedGather::finish after).
void gather_bucket(const StoreParts& p, int id, float* whole, uint16_t* whole16, std::vector<Request>& pending) {
  const Bucket& b = p.shards.buckets()[size_t(id)];
  float* shard = p.shard.params.data();
  const double t0 = p.tracer.now();
  if (whole16) p.copies.mixed().start(id, p.dp, p.copies.shard(p.shard_vec(p.shard.params)).bits.data(), shard, whole16, pending);
  else pending.push_back(p.dp.iall_gather(shard + b.shard_offset, whole, b.piece.size(), DType::f32));
  p.tracer.record(EventKind::all_gather_issue, p.step, id, t0, p.tracer.now(), int64_t(bucket_gather_bytes(p, id)));
}

void set_shard(const StoreParts& p, const std::vector<float>& values) {
  Buffer<float> whole = uninitialized<float>("whole", values.size());
  Kokkos::deep_copy(ExecSpace(), whole, HostFloats(const_cast<float*>(values.data()), values.size()));
  p.scatter_pieces(whole.data(), p.shard.params.data());
}

// ZeRO 0-2: the whole local layout, which the stage reads in place.
class WholeParams final : public ParamSource {
 public:
  WholeParams(const StoreParts& p, Buffer<float> whole, bool sharded_update)
      : p_(p), whole_(std::move(whole)), sharded_(sharded_update) {}
  const float* params(int u) override { return whole_.data() + p_.unit(u).range.begin; }
  const uint16_t* low_params(int u) override {
    return p_.copies.whole_bits(Vec<float>(whole_.data(), whole_.extent(0)), p_.unit(u).range.begin);
  }
  void updated() override {
    if (sharded_) gather_updated();
  }
  void init(uint64_t seed) override {
    init_params<float>(p_.layout.global(), p_.layout.tensors(), seed, {0, p_.layout.local_size()},
                       Vec<float>(whole_.data(), whole_.extent(0)));
    if (sharded_) p_.scatter_pieces(whole_.data(), p_.shard.params.data());
  }
  void set(const std::vector<float>& values) override {
    Kokkos::deep_copy(ExecSpace(), whole_, HostFloats(const_cast<float*>(values.data()), values.size()));
    if (sharded_) p_.scatter_pieces(whole_.data(), p_.shard.params.data());
  }
  bool only_in_shard() const override { return p_.copies.mixed().active(); }
  CVec<float> whole() const override { return CVec<float>(whole_.data(), whole_.extent(0)); }

 private:
  void gather_updated();

  const StoreParts& p_;
  Buffer<float> whole_;
  bool sharded_;
};

// ZeRO-1/2: every rank's updated pieces back into the whole parameters (a block's matrices into the
// working copy alone when 16-bit gathers are on).
void WholeParams::gather_updated() {
  const MixedGather& mixed = p_.copies.mixed();
  const std::vector<Bucket>& buckets = p_.shards.buckets();
  std::vector<Request> pending;
  for (size_t id = 0; id < buckets.size(); ++id) {
    const Bucket& b = buckets[id];
    gather_bucket(p_, int(id), whole_.data() + b.range.begin,
                  mixed.sixteen_bit(b.unit) ? p_.copies.whole_at(b.range.begin) : nullptr, pending);
  }
  {
    Tracer::Scope t(p_.tracer, EventKind::all_gather_wait, p_.step, -1);
    for (Request& r : pending) p_.dp.order_after(r);
  }
  p_.copies.gathered(mixed.active());  // fp32 gathered: the copy is rounded at its next use
  if (!mixed.active()) return;
  for (size_t id = 0; id < buckets.size(); ++id)
    if (mixed.sixteen_bit(buckets[id].unit)) p_.copies.mixed().finish(int(id), whole_.data() + buckets[id].range.begin);
  // A unit gathered in fp32 whose weights a GEMM reads: wte, for the LM head of a one-stage model.
  const int head = p_.layout.has_head() ? p_.layout.head_wte_unit() : -1;
  if (head >= 0 && !mixed.sixteen_bit(head))
    p_.copies.round_whole(Vec<float>(whole_.data(), whole_.extent(0)), p_.unit(head).range);
}

// ZeRO-3 (FSDP): the shard alone at rest; a unit is gathered for each use (prefetched ahead of it)
// and its workspace goes back to the pool when its last user releases it.
class GatheredParams final : public ParamSource {
 public:
  explicit GatheredParams(const StoreParts& p);
  const float* params(int u) override;
  const uint16_t* low_params(int u) override;
  void prefetch(int u) override {
    if (u >= 0 && !units_[size_t(u)].buf.extent(0)) start(u);
  }
  void release(int u) override;
  void init(uint64_t seed) override {
    for (const Bucket& b : p_.shards.buckets())  // deferred initialisation: only this rank's pieces
      init_params<float>(p_.layout.global(), p_.layout.tensors(), seed, b.piece,
                         Vec<float>(p_.shard.params.data() + b.shard_offset, b.piece.size()));
  }
  void set(const std::vector<float>& values) override { set_shard(p_, values); }
  bool only_in_shard() const override { return true; }

 private:
  struct Gathered {  // a unit's parameters gathered now
    Buffer<float> buf;
    Buffer<uint16_t> low;  // a sixteen_bit unit's matrices (buf then holds its fp32 tensors only)
    std::vector<Request> pending;
    int refs = 0;
  };
  void start(int u);
  void wait(int u);

  const StoreParts& p_;
  std::vector<Gathered> units_;
};

// Set-up: the unit in use, the one prefetched and one being released, fp32 and (16-bit gathers)
// 16-bit, made now (no step allocates).
GatheredParams::GatheredParams(const StoreParts& p) : p_(p), units_(p.layout.units().size()) {
  std::map<size_t, std::pair<int, int>> sizes;  // size -> (units of that size, of them 16-bit gathered)
  for (size_t u = 0; u < units_.size(); ++u) {
    auto& c = sizes[p.unit(int(u)).range.size()];
    ++c.first;
    c.second += p.copies.mixed().sixteen_bit(int(u));
  }
  for (const auto& [n, count] : sizes) {
    BufferPool<float>& f32 = p.workspaces.pool<float>();
    BufferPool<uint16_t>& u16 = p.workspaces.pool<uint16_t>();
    f32.reserve(n, f32.made(n) + std::min(count.first, 3));
    u16.reserve(n, u16.made(n) + std::min(count.second, 3));
  }
}

void GatheredParams::start(int u) {
  Gathered& g = units_[size_t(u)];
  const Unit& un = p_.unit(u);
  const bool low = p_.copies.mixed().sixteen_bit(u);
  g.buf = p_.workspaces.take<float>(un.range.size());
  if (low) g.low = p_.workspaces.take<uint16_t>(un.range.size());
  for (int id : p_.shards.buckets_of(u)) {
    const size_t at = p_.shards.buckets()[size_t(id)].range.begin - un.range.begin;
    gather_bucket(p_, id, g.buf.data() + at, low ? g.low.data() + at : nullptr, g.pending);
  }
}

void GatheredParams::wait(int u) {
  Gathered& g = units_[size_t(u)];
  if (!g.buf.extent(0)) start(u);
  if (g.pending.empty()) return;
  {
    Tracer::Scope t(p_.tracer, EventKind::all_gather_wait, p_.step, u);
    for (Request& r : g.pending) p_.dp.order_after(r);
    g.pending.clear();
  }
  if (g.low.extent(0))
    for (int id : p_.shards.buckets_of(u))
      p_.copies.mixed().finish(id, g.buf.data() + (p_.shards.buckets()[size_t(id)].range.begin - p_.unit(u).range.begin));
}

const float* GatheredParams::params(int u) {
  wait(u);
  Gathered& g = units_[size_t(u)];
  ++g.refs;
  return g.buf.data();
}

const uint16_t* GatheredParams::low_params(int u) {  // valid while the stage holds params(u)
  if (!p_.copies.mixed().sixteen_bit(u)) return nullptr;
  wait(u);
  return units_[size_t(u)].low.data();
}

void GatheredParams::release(int u) {
  Gathered& g = units_[size_t(u)];
  if (--g.refs > 0) return;
  p_.workspaces.give(std::move(g.buf));
  p_.workspaces.give(std::move(g.low));
  g.buf = Buffer<float>();
  g.low = Buffer<uint16_t>();
  g.refs = 0;
}
}  // namespace

void StoreParts::scatter_pieces(const float* whole, float* shard_out) const {
  for (const Bucket& b : shards.buckets())
    Kokkos::deep_copy(ExecSpace(), Vec<float>(shard_out + b.shard_offset, b.piece.size()),
                      Vec<float>(const_cast<float*>(whole) + b.piece.begin, b.piece.size()));
}

size_t bucket_gather_bytes(const StoreParts& parts, int id) {
  const Bucket& b = parts.shards.buckets()[size_t(id)];
  const MixedGather& mixed = parts.copies.mixed();
  return mixed.sixteen_bit(b.unit) ? mixed.bytes(id) : b.range.size() * sizeof(float);
}

std::unique_ptr<ParamSource> make_param_source(const ShardPolicy& policy, const StoreParts& parts,
                                               Buffer<float> whole) {
  if (policy.params) return std::make_unique<GatheredParams>(parts);
  return std::make_unique<WholeParams>(parts, std::move(whole), policy.optimizer);
}

}  // namespace gpt2
