// The two homes of a ParamStore's gradients (parallel/grad_sink.hpp).
#include "parallel/grad_sink.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"

namespace gpt2 {

namespace {

// ZeRO 0-1: the whole gradients accumulate over the step's microbatches; reduced after the last.
class WholeGrads final : public GradSink {
 public:
  WholeGrads(const StoreParts& p, Buffer<float> whole, bool sharded_update)
      : GradSink(p.layout.units().size()), p_(p), whole_(std::move(whole)), sharded_(sharded_update) {
    p_.reducer.reserve(false);
  }
  float* grads(int u) override { return whole_.data() + p_.unit(u).range.begin; }
  void done(int u) override {
    if (!last_of_step(u)) return;
    settle(u);
    p_.reducer.reduce(u, grads(u), p_.shard.grads.data(), false,
                      [this, u]() { p_.norm.unit_final(u, p_.shard_vec(p_.shard.grads)); });
  }
  void finish() override {
    for (int u = 0; u < int(done_.size()); ++u) {
      if (!incomplete(u)) continue;  // a unit no microbatch completed (none in GPT-2's stages)
      done_[size_t(u)] = microbatches_;
      settle(u);
      p_.reducer.reduce(u, grads(u), p_.shard.grads.data(), false);
    }
  }
  bool zeroed_by_update() const override { return !sharded_; }
  size_t whole_size() const override { return whole_.extent(0); }
  void wrote(int u, const float* at, size_t n) override {
    if (final_now(u)) p_.norm.region_final(u, shard_range(at, n), p_.shard_vec(p_.shard.grads));
  }

 private:
  // ZeRO-0's whole gradients are the shard, which the last update may have zeroed already.
  void zero(bool zeroed) override {
    if (!zeroed || sharded_) Kokkos::deep_copy(ExecSpace(), whole_, 0.0f);
  }
  bool keeps_stored() const override { return !sharded_; }
  size_t offset(int u) const override { return p_.unit(u).range.begin; }
  void writing(int u, Range r) override {
    if (in_shard()) p_.norm.written_again(u, {offset(u) + r.begin, offset(u) + r.end});
  }
  // The whole gradients are the shard, which reduce() leaves as it is (ZeRO-0 on one rank).
  bool in_shard() const { return !sharded_ && p_.reducer.in_place() && whole_.data() == p_.shard.grads.data(); }
  // What u's writers write now is final for the step: its last microbatch, no reduction to come.
  bool final_now(int u) const { return in_shard() && done_[size_t(u)] + 1 == microbatches_; }
  Range shard_range(const float* at, size_t n) const {
    const size_t b = size_t(at - whole_.data());
    return {b, b + n};
  }

  const StoreParts& p_;
  Buffer<float> whole_;
  bool sharded_;
};

// ZeRO-2/3: a unit's gradient of one microbatch in a workspace, reduced into the shard at once.
class WorkspaceGrads final : public GradSink {
 public:
  explicit WorkspaceGrads(const StoreParts& p);
  float* grads(int u) override;
  void done(int u) override;
  void finish() override {
    for (int u = 0; u < int(ws_.size()); ++u)
      if (ws_[size_t(u)].extent(0)) done(u);
  }
  bool zeroed_by_update() const override { return true; }

 private:
  void zero(bool zeroed) override {
    if (!zeroed) Kokkos::deep_copy(ExecSpace(), p_.shard.grads, 0.0f);
  }

  const StoreParts& p_;
  std::vector<Buffer<float>> ws_;  // each unit's workspace this round
};

// Set-up: a workspace for the unit in backward and one whose reduction is still in flight, made now
// (no step allocates); more in flight at once reclaim the oldest reduction's.
WorkspaceGrads::WorkspaceGrads(const StoreParts& p) : GradSink(p.layout.units().size()), p_(p), ws_(done_.size()) {
  p_.reducer.reserve(true);  // each microbatch's reduction adds into the shard
  std::map<size_t, int> sizes;
  for (size_t u = 0; u < ws_.size(); ++u) ++sizes[p.unit(int(u)).range.size()];
  BufferPool<float>& pool = p.workspaces.pool<float>();
  for (const auto& [n, count] : sizes) pool.reserve(n, pool.made(n) + std::min(count, 2));
}

float* WorkspaceGrads::grads(int u) {
  Buffer<float>& ws = ws_[size_t(u)];
  if (!ws.extent(0)) {
    ws = p_.workspaces.take<float>(p_.unit(u).range.size());
    Kokkos::deep_copy(ExecSpace(), ws, 0.0f);
    zeroed(u);
  }
  return ws.data();
}

void WorkspaceGrads::done(int u) {
  const bool last = last_of_step(u);
  Buffer<float> ws = std::move(ws_[size_t(u)]);
  ws_[size_t(u)] = Buffer<float>();
  if (!ws.extent(0)) return;
  p_.reducer.reduce(u, ws.data(), p_.shard.grads.data(), true, [this, ws, u, last]() {
    p_.workspaces.give(ws);
    if (last) p_.norm.unit_final(u, p_.shard_vec(p_.shard.grads));
  });
}

}  // namespace

namespace {
bool overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }
}  // namespace

void GradSink::begin_step(int microbatches, bool zeroed) {
  microbatches_ = microbatches;
  for (int& d : done_) d = 0;
  zero(zeroed);
  const bool kept = zeroed && keeps_stored();  // the update left the stored regions as they were
  for (size_t u = 0; u < done_.size(); ++u) {
    stale_[u].clear();
    if (kept) stale_[u].swap(stored_[u]);
    stored_[u].clear();
    written_[u].clear();  // every buffer is 0 now, but for the stale regions
  }
}

bool GradSink::first_write(int u, const float* at, size_t n, bool store) {
  if (n == 0) return false;
  const float* base = grads(u);
  if (at < base) fail("GradSink::first_write: a region before unit ", u, "'s gradients");
  const Range r{size_t(at - base), size_t(at - base) + n};
  writing(u, r);
  std::vector<Range>& w = written_[size_t(u)];
  store = store && std::none_of(w.begin(), w.end(), [&](const Range& x) { return overlap(x, r); });
  // The last step's values under r: a store over all of a stale region replaces them, else they go to
  // 0 before the writer adds to them (a writer that stored there last step adds now, or writes less).
  std::vector<Range>& st = stale_[size_t(u)];
  st.erase(std::remove_if(st.begin(), st.end(),
                          [&](const Range& x) {
                            if (!overlap(x, r)) return false;
                            if (!(store && r.contains(x))) clear(u, x);
                            return true;
                          }),
           st.end());
  // (the head's blocks of rows write wte's whole gradient each: kept once)
  if (std::none_of(w.begin(), w.end(), [&](const Range& x) { return x.contains(r); })) w.push_back(r);
  if (store) stored_[size_t(u)].push_back(r);
  return store;
}

const std::vector<Range>& GradSink::kept() {
  kept_.clear();
  if (!keeps_stored()) return kept_;
  for (size_t u = 0; u < stored_.size(); ++u)
    for (const Range& r : stored_[u]) kept_.push_back({offset(int(u)) + r.begin, offset(int(u)) + r.end});
  std::sort(kept_.begin(), kept_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  return kept_;
}

void GradSink::settle(int u) {
  for (const Range& r : stale_[size_t(u)]) clear(u, r);
  stale_[size_t(u)].clear();
}

void GradSink::clear(int u, Range r) {
  Kokkos::deep_copy(ExecSpace(), Vec<float>(grads(u) + r.begin, r.size()), 0.0f);
}

std::unique_ptr<GradSink> make_grad_sink(const ShardPolicy& policy, const StoreParts& parts, Buffer<float> whole) {
  if (policy.grads) return std::make_unique<WorkspaceGrads>(parts);
  return std::make_unique<WholeGrads>(parts, std::move(whole), policy.optimizer);
}

}  // namespace gpt2
