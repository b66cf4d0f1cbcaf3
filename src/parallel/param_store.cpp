// ParamStore (parallel/param_store.hpp): its layout, the parameters served unit by unit (gathered
// under ZeRO-3), the gradients reduced as units complete, the norm and the update. Its state as a
// whole -- initialisation, checkpoint sections, memory -- is in param_store_state.cpp.
#include "parallel/param_store.hpp"

#include <map>

#include "core/error.hpp"
#include "parallel/matrix_shards.hpp"

namespace gpt2 {

namespace {
Vec<float> vec(float* p, size_t n) { return Vec<float>(p, n); }
}  // namespace

ParamStore::ParamStore(const StageLayout& layout, Communicator& dp, ShardPolicy policy, size_t bucket_elems,
                       const std::string& optimizer, const OptimizerConfig& oc, Tracer& tracer, DType grad_wire,
                       Precision working, bool gather16, Communicator* tp)
    : layout_(layout),
      dp_(dp),
      policy_(policy),
      tracer_(tracer),
      shards_(layout_, policy.optimizer ? dp.size() : 1, policy.optimizer ? dp.rank() : 0, bucket_elems),
      reducer_(dp, shards_,
               policy.optimizer ? GradientReducer::Mode::reduce_scatter : GradientReducer::Mode::all_reduce, tracer,
               grad_wire),
      copies_(layout_, shards_, working, !policy.params, policy.optimizer && gather16),
      norm_(layout_, shards_),
      replicated_(layout_, shards_),
      units_(layout_.units().size()) {
  const size_t n = layout_.local_size(), s = shards_.shard_size();
  if (!policy_.params) buf_.params = Buffer<float>("params", n);
  if (!policy_.grads) buf_.grads = Buffer<float>("grads", n);
  buf_.param_shard = policy_.optimizer ? Buffer<float>("param_shard", s) : buf_.params;
  buf_.grad_shard = policy_.optimizer ? Buffer<float>("grad_shard", s) : buf_.grads;
  // An optimizer of whole matrices gets them from their parts when the ranks hold parts.
  const bool split = shards_.ranks() > 1 || layout_.tp().size > 1;
  if (split && OptimizerRegistry::get(optimizer, "train.optimizer").whole_matrices) {
    if (layout_.tp().size > 1 && (!tp || tp->size() != layout_.tp().size))
      fail("ParamStore: ", optimizer, " needs the tensor-parallel group");
    matrices_ = std::make_unique<CommMatrixShards>(layout_, shards_, dp, *tp);
  }
  opt_ = make_optimizer(optimizer, shards_.shard_tensors(), s, oc, matrices_.get());
  reserve_workspaces();
}

// Set-up: what a step's units take from the pools, made now (no step allocates). ZeRO-2/3: a
// gradient workspace for the unit in backward and one whose reduction is still in flight; ZeRO-3
// also the unit in use, the one prefetched and one being released, fp32 and (16-bit gathers) 16-bit.
// More in flight at once reclaim the oldest reduction's (a stream dependency, no allocation).
void ParamStore::reserve_workspaces() {
  reducer_.reserve(policy_.grads);  // ZeRO-2/3 add each microbatch's reduction into the shard
  std::map<size_t, std::pair<int, int>> units;  // size -> (units of that size, of them 16-bit gathered)
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    auto& c = units[unit(int(u)).range.size()];
    ++c.first;
    c.second += copies_.mixed().sixteen_bit(int(u));
  }
  for (const auto& [n, count] : units) {
    const int grads = policy_.grads ? std::min(count.first, 2) : 0, gathered = policy_.params ? std::min(count.first, 3) : 0;
    pools_.f32.reserve(n, grads + gathered);
    if (policy_.params) pools_.u16.reserve(n, std::min(count.second, 3));
  }
}

ParamStore::~ParamStore() = default;

// ---- workspaces ------------------------------------------------------------------------------

template <>
BufferPool<float>& ParamStore::pool<float>() {
  return pools_.f32;
}
template <>
BufferPool<uint16_t>& ParamStore::pool<uint16_t>() {
  return pools_.u16;
}

template <class T>
Buffer<T> ParamStore::take(size_t n) {
  return pool<T>().take(n, [this] { return reducer_.complete_oldest(); });
}

template <class T>
void ParamStore::give(Buffer<T> b) {
  pool<T>().give(std::move(b));
}

// ---- parameters -----------------------------------------------------------------------------

size_t ParamStore::bucket_gather_bytes(int id) const {
  const Bucket& b = shards_.buckets()[size_t(id)];
  const MixedGather& mixed = copies_.mixed();
  return mixed.sixteen_bit(b.unit) ? mixed.bytes(id) : b.range.size() * sizeof(float);
}

void ParamStore::gather_bucket(int id, float* whole, uint16_t* whole16, std::vector<Request>& pending) {
  const Bucket& b = shards_.buckets()[size_t(id)];
  const uint16_t* shard16 = whole16 ? copies_.shard(shard_vec(buf_.param_shard)).bits.data() : nullptr;
  const double t0 = tracer_.now();
  if (whole16) copies_.mixed().start(id, dp_, shard16, buf_.param_shard.data(), whole16, pending);
  else pending.push_back(dp_.iall_gather(buf_.param_shard.data() + b.shard_offset, whole, b.piece.size(), DType::f32));
  tracer_.record(EventKind::all_gather_issue, now_.step, id, t0, tracer_.now(), int64_t(bucket_gather_bytes(id)));
}

void ParamStore::start_gather(int u) {
  Gathered& g = units_[size_t(u)].gathered;
  const Unit& un = unit(u);
  const bool low = copies_.mixed().sixteen_bit(u);
  g.buf = take<float>(un.range.size());
  if (low) g.low = take<uint16_t>(un.range.size());
  for (int id : shards_.buckets_of(u)) {
    const size_t at = shards_.buckets()[size_t(id)].range.begin - un.range.begin;
    gather_bucket(id, g.buf.data() + at, low ? g.low.data() + at : nullptr, g.pending);
  }
}

void ParamStore::wait_gather(int u) {
  Gathered& g = units_[size_t(u)].gathered;
  if (!g.buf.extent(0)) start_gather(u);
  if (g.pending.empty()) return;
  {
    Tracer::Scope t(tracer_, EventKind::all_gather_wait, now_.step, u);
    for (Request& r : g.pending) dp_.order_after(r);
    g.pending.clear();
  }
  if (g.low.extent(0))
    for (int id : shards_.buckets_of(u))
      copies_.mixed().finish(id, g.buf.data() + (shards_.buckets()[size_t(id)].range.begin - unit(u).range.begin));
}

const float* ParamStore::params(int u) {
  if (!policy_.params) return buf_.params.data() + unit(u).range.begin;
  wait_gather(u);
  Gathered& g = units_[size_t(u)].gathered;
  ++g.refs;
  return g.buf.data();
}

const uint16_t* ParamStore::low_params(int u) {
  if (policy_.params) {  // valid while the stage holds params(u)
    if (!copies_.mixed().sixteen_bit(u)) return nullptr;
    wait_gather(u);
    return units_[size_t(u)].gathered.low.data();
  }
  return copies_.whole_bits(vec(buf_.params.data(), buf_.params.extent(0)), unit(u).range.begin);
}

void ParamStore::prefetch_params(int u) {
  if (policy_.params && u >= 0 && !units_[size_t(u)].gathered.buf.extent(0)) start_gather(u);
}

void ParamStore::release_params(int u) {
  if (!policy_.params) return;
  Gathered& g = units_[size_t(u)].gathered;
  if (--g.refs > 0) return;
  give(std::move(g.buf));
  give(std::move(g.low));
  g.buf = Buffer<float>();
  g.low = Buffer<uint16_t>();
  g.refs = 0;
}

// ---- gradients ------------------------------------------------------------------------------

float* ParamStore::grads(int u) {
  if (!policy_.grads) return buf_.grads.data() + unit(u).range.begin;
  Buffer<float>& ws = units_[size_t(u)].grad_ws;
  if (!ws.extent(0)) {
    ws = take<float>(unit(u).range.size());
    Kokkos::deep_copy(ExecSpace(), ws, 0.0f);
  }
  return ws.data();
}

void ParamStore::grads_done(int u, bool in_forward) {
  if (in_forward != unit(u).grads_final_in_forward()) return;  // more is coming in the other phase
  UnitState& us = units_[size_t(u)];
  const bool last = ++us.done == now_.microbatches;
  float* shard = buf_.grad_shard.data();
  if (!policy_.grads) {
    // Whole gradients accumulate over the step's microbatches: reduce after the last one.
    if (!last) return;
    reducer_.reduce(u, buf_.grads.data() + unit(u).range.begin, shard, false,
                    [this, u]() { norm_.unit_final(u, shard_vec(buf_.grad_shard)); });
    return;
  }
  // The workspace holds this round's part: reduce it into the shard, recycle it when done.
  Buffer<float> ws = std::move(us.grad_ws);
  us.grad_ws = Buffer<float>();
  if (!ws.extent(0)) return;
  reducer_.reduce(u, ws.data(), shard, true, [this, ws, u, last]() {
    give(ws);
    if (last) norm_.unit_final(u, shard_vec(buf_.grad_shard));
  });
}

void ParamStore::begin_step(int step, int microbatches) {
  now_.step = step;
  now_.microbatches = microbatches;
  reducer_.begin_step(step);
  for (UnitState& us : units_) us.done = 0;
  norm_.begin_step();
  // The accumulating buffer is the shard (ZeRO-0: the whole gradients; ZeRO-2/3) unless ZeRO-1's
  // reduce-scatter overwrites it from whole gradients; the last update may have zeroed it already.
  const Buffers& b = buf_;
  if (b.grads.extent(0) && !(now_.grads_zeroed && b.grad_shard.data() == b.grads.data()))
    Kokkos::deep_copy(ExecSpace(), b.grads, 0.0f);
  if (policy_.grads && !now_.grads_zeroed) Kokkos::deep_copy(ExecSpace(), b.grad_shard, 0.0f);
  now_.grads_zeroed = false;
}

void ParamStore::finish_gradients() {
  for (size_t u = 0; u < units_.size(); ++u) {
    // A unit no microbatch completed (none in GPT-2's stages, but never lose one).
    if (!policy_.grads && units_[u].done < now_.microbatches) {
      units_[u].done = now_.microbatches;
      reducer_.reduce(int(u), buf_.grads.data() + unit(int(u)).range.begin, buf_.grad_shard.data(), false);
    }
    if (units_[u].grad_ws.extent(0)) grads_done(int(u), unit(int(u)).grads_final_in_forward());
  }
  reducer_.finish();
}

void ParamStore::sync_tied(Communicator& tied) {
  if (tied.size() == 1) return;  // pp = 1, or a middle stage
  // Both ends share wte out alike (ShardLayout), so their shard ranges of it match element by element.
  int u = layout_.unit_index(UnitKind::tied_wte);  // the last stage's copy, or stage 0's own
  if (u < 0) u = layout_.unit_index(UnitKind::wte);
  const Range r = shards_.shard_range(u);
  Tracer::Scope t(tracer_, EventKind::tied_sync, now_.step, -1, r.size() * sizeof(float) * 2);
  tied.allreduce(buf_.grad_shard.data() + r.begin, r.size(), DType::f32, ReduceOp::sum);
  norm_.defer(u);  // changed after its reduction: counted at the end from now on
}

void ParamStore::grad_sum_of_squares(DeviceScalar out) { norm_.total(shard_vec(buf_.grad_shard), out); }

void ParamStore::sync_replicated(Communicator& tp) {
  replicated_.sync(tp, buf_.grad_shard.data(), tracer_, now_.step);
  if (tp.size() == 1) return;
  // The units holding replicated tensors changed after their reduction: counted at the end from now on.
  for (size_t u = 0; u < units_.size(); ++u)
    if (replicated_.touches(shards_.shard_range(int(u)))) norm_.defer(int(u));
}

void ParamStore::optimizer_step(double lr, GradScale scale) {
  const bool accumulates = !policy_.optimizer || policy_.grads;  // see begin_step
  // The update writes the working copy with the masters: ZeRO-0 the whole one, sharding the shard's.
  opt_->step(shard_vec(buf_.param_shard), shard_vec(buf_.grad_shard), lr, scale, accumulates,
             copies_.optimizer_target(policy_.optimizer));
  now_.grads_zeroed = accumulates;
  if (policy_.optimizer && !policy_.params) gather_updated();
}

// ZeRO-1/2: every rank's updated pieces back into the whole parameters (a block's matrices into the
// working copy alone when 16-bit gathers are on).
void ParamStore::gather_updated() {
  const MixedGather& mixed = copies_.mixed();
  auto each_bucket = [&](auto f) {
    for (size_t i = 0; i < shards_.buckets().size(); ++i) f(int(i), shards_.buckets()[i]);
  };
  std::vector<Request> pending;
  each_bucket([&](int id, const Bucket& b) {
    gather_bucket(id, buf_.params.data() + b.range.begin,
                  mixed.sixteen_bit(b.unit) ? copies_.whole_at(b.range.begin) : nullptr, pending);
  });
  {
    Tracer::Scope t(tracer_, EventKind::all_gather_wait, now_.step, -1);
    for (Request& r : pending) dp_.order_after(r);
  }
  copies_.gathered(mixed.active());  // fp32 gathered: the copy is rounded at its next use
  if (!mixed.active()) return;
  each_bucket([&](int id, const Bucket& b) {
    if (mixed.sixteen_bit(b.unit)) copies_.mixed().finish(id, buf_.params.data() + b.range.begin);
  });
  // A unit gathered in fp32 whose weights a GEMM reads: wte, for the LM head of a one-stage model.
  const int head = layout_.has_head() ? layout_.head_wte_unit() : -1;
  if (head >= 0 && !mixed.sixteen_bit(head))
    copies_.round_whole(vec(buf_.params.data(), buf_.params.extent(0)), unit(head).range);
}

}  // namespace gpt2
