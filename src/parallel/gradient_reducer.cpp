#include "parallel/gradient_reducer.hpp"

#include <algorithm>
#include <map>

#include "tensor/convert.hpp"
#include "tensor/residual.hpp"

namespace gpt2 {

GradientReducer::GradientReducer(Communicator& dp, const ShardLayout& shards, Mode mode, Tracer& tracer, DType wire)
    : dp_(dp), shards_(shards), mode_(mode), tracer_(tracer), wire_(wire) {}

bool GradientReducer::reclaim() {
  if (!pending_.empty() && issued_ - pending_.front().seq < buckets_) ++buffer_waits_;
  return complete_oldest();
}

bool GradientReducer::complete_oldest() {
  if (pending_.empty()) return false;
  Pending p = std::move(pending_.front());
  pending_.erase(pending_.begin());
  dp_.order_after(p.request);
  complete(p);
  return true;
}

void GradientReducer::reserve(bool accumulate) {
  const bool scatter = mode_ == Mode::reduce_scatter;
  if (!scatter && !active()) return;
  std::map<size_t, int> wire, staging;  // buffers of each size one backward takes
  for (const Bucket& b : shards_.buckets()) {
    if (wire_ == DType::bf16) {
      ++wire[b.range.size()];
      if (scatter) ++wire[b.piece.size()];
    } else if (scatter && accumulate) {
      ++staging[b.piece.size()];
    }
  }
  buckets_ = int64_t(shards_.buckets().size());
  for (const auto& [n, count] : wire) wire_pool_.reserve(n, count);
  for (const auto& [n, count] : staging) staging_pool_.reserve(n, count);
}

void GradientReducer::begin_step(int step) {
  step_ = step;
  issue_s_ = wait_s_ = 0;
}

void GradientReducer::reduce(int u, float* unit_grads, float* shard, bool accumulate, std::function<void()> done) {
  const bool scatter = mode_ == Mode::reduce_scatter;
  if (!scatter && !active()) {  // one rank: its gradient is the average
    if (done) done();
    return;
  }
  const std::vector<int>& ids = shards_.buckets_of(u);
  const size_t unit_begin = shards_.buckets()[size_t(ids.front())].range.begin;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Bucket& b = shards_.buckets()[size_t(ids[i])];
    const double t0 = tracer_.now();
    Pending p;
    p.unit = u, p.dst = nullptr;
    if (i + 1 == ids.size()) p.done = done;
    float* src = unit_grads + (b.range.begin - unit_begin);
    if (wire_ == DType::bf16) {
      // Rounded into bf16 for the wire; back into fp32 when complete.
      const size_t n = b.range.size(), piece = b.piece.size();
      auto reclaim = [this] { return this->reclaim(); };
      Buffer<bf16> send = wire_pool_.take(n, reclaim);
      convert<bf16, float>(Vec<bf16>(send.data(), n), Vec<const float>(src, n));
      if (!scatter) {
        p.request = dp_.iallreduce(send.data(), n, DType::bf16, ReduceOp::avg);
        p.wire = send, p.dst = src;
      } else {
        p.wire = wire_pool_.take(piece, reclaim);
        p.request = dp_.ireduce_scatter(send.data(), p.wire.data(), piece, DType::bf16, ReduceOp::avg);
        p.wire_send = std::move(send);  // kept until the collective completes
        p.dst = shard + b.shard_offset, p.add = accumulate;
      }
    } else if (!scatter) {
      p.request = dp_.iallreduce(src, b.range.size(), DType::f32, ReduceOp::avg);
    } else {
      float* out = shard + b.shard_offset;
      if (accumulate) {
        const size_t n = b.piece.size();
        p.staging = staging_pool_.take(n, [this] { return reclaim(); });
        p.dst = out;
        out = p.staging.data();
      }
      p.request = dp_.ireduce_scatter(src, out, b.piece.size(), DType::f32, ReduceOp::avg);
    }
    const double t1 = tracer_.now();
    issue_s_ += t1 - t0;
    const size_t bytes = b.range.size() * dtype_size(wire_) * (scatter ? 1 : 2);
    tracer_.record(scatter ? EventKind::reduce_scatter_issue : EventKind::allreduce_issue, step_, ids[i], t0, t1,
                   active() ? int64_t(bytes) : 0);
    p.seq = issued_++;
    pending_.push_back(std::move(p));
  }
  progress();
}

void GradientReducer::complete(Pending& p) {
  if (p.wire.extent(0)) {
    const size_t n = p.wire.extent(0);
    const Vec<const bf16> in(p.wire.data(), n);
    if (p.add) convert_add<float, bf16>(Vec<float>(p.dst, n), in);
    else convert<float, bf16>(Vec<float>(p.dst, n), in);
    wire_pool_.give(std::move(p.wire));
    wire_pool_.give(std::move(p.wire_send));
  } else if (p.dst) {
    accumulate<float>(Vec<float>(p.dst, p.staging.extent(0)), Vec<float>(p.staging.data(), p.staging.extent(0)));
    staging_pool_.give(std::move(p.staging));
  }
  if (p.done) p.done();
}

void GradientReducer::progress() {
  dp_.progress();
  // Complete in launch order only, so that a unit's `done` runs after all its buckets.
  size_t n = 0;
  while (n < pending_.size() && dp_.test(pending_[n].request)) complete(pending_[n++]);
  pending_.erase(pending_.begin(), pending_.begin() + long(n));
}

void GradientReducer::finish() {
  const double t0 = tracer_.now();
  for (Pending& p : pending_) {
    dp_.order_after(p.request);
    complete(p);
  }
  pending_.clear();
  const double t1 = tracer_.now();
  wait_s_ = t1 - t0;
  if (active())
    tracer_.record(mode_ == Mode::reduce_scatter ? EventKind::reduce_scatter_wait : EventKind::allreduce_wait, step_, -1,
                   t0, t1);
}

}  // namespace gpt2
