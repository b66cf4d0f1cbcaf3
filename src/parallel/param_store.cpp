// ParamStore (parallel/param_store.hpp): its layout, the parameters served unit by unit (gathered
// under ZeRO-3), the gradients reduced as units complete, the norm and the update. Its state as a
// whole -- initialisation, checkpoint sections, memory -- is in param_store_state.cpp.
#include "parallel/param_store.hpp"

#include "core/error.hpp"

namespace gpt2 {

namespace {
Vec<float> vec(float* p, size_t n) { return Vec<float>(p, n); }
}  // namespace

ParamStore::ParamStore(const StageLayout& layout, Communicator& dp, ShardPolicy policy, size_t bucket_elems,
                       const std::string& optimizer, const OptimizerConfig& oc, Tracer& tracer, DType grad_wire,
                       Precision working, bool gather16)
    : layout_(layout),
      dp_(dp),
      policy_(policy),
      tracer_(tracer),
      shards_(layout_, policy.optimizer ? dp.size() : 1, policy.optimizer ? dp.rank() : 0, bucket_elems),
      reducer_(dp, shards_,
               policy.optimizer ? GradientReducer::Mode::reduce_scatter : GradientReducer::Mode::all_reduce, tracer,
               grad_wire) {
  const size_t n = layout_.local_size(), s = shards_.shard_size();
  if (!policy_.params) params_ = Buffer<float>("params", n);
  if (!policy_.grads) grads_ = Buffer<float>("grads", n);
  param_shard_ = policy_.optimizer ? Buffer<float>("param_shard", s) : params_;
  grad_shard_ = policy_.optimizer ? Buffer<float>("grad_shard", s) : grads_;
  opt_ = make_optimizer(optimizer, shards_.shard_tensors(), s, oc);
  if (working != Precision::fp32 && !policy_.params) {
    copy_buf_ = Buffer<uint16_t>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "params16"), n);
    copy_ = WorkingCopy{Vec<uint16_t>(copy_buf_.data(), n), working};
  }
  if (working != Precision::fp32 && policy_.optimizer && gather16) {
    mixed_ = MixedGather(layout_, shards_);
    shard_copy_buf_ = Buffer<uint16_t>("param_shard16", s);  // (zeroed: the gaps between tensors too)
    shard_copy_ = WorkingCopy{Vec<uint16_t>(shard_copy_buf_.data(), s), working};
  }
  const size_t units = layout_.units().size();
  gathered_.resize(units);
  grad_ws_.resize(units);
  done_count_.assign(units, 0);
  // The norm: everything but the tied copy (stage 0 counts wte), replicated tensors on tp rank 0.
  const int tied = layout_.unit_index(UnitKind::tied_wte);
  const size_t skip = tied >= 0 ? shards_.shard_range(tied).end : 0;
  std::vector<std::pair<size_t, size_t>> counted;
  for (const auto& r : shard_ranges(false))
    if (r.second > skip) counted.push_back({std::max(r.first, skip), r.second});
  // Chunks never cross a unit's end, so a unit's chunks can be summed once its gradient is final.
  std::vector<std::pair<size_t, size_t>> cut;
  unit_chunks_.assign(units, {0, 0});
  for (size_t u = 0, at = 0, chunks = 0; u < units; ++u) {
    const Range ur = shards_.shard_range(int(u));
    unit_chunks_[u].first = int64_t(chunks);
    for (; at < counted.size() && counted[at].first < ur.end; ++at) {
      const size_t b = std::max(counted[at].first, ur.begin), e = std::min(counted[at].second, ur.end);
      if (b < e) cut.push_back({b, e}), chunks += (e - b + 4095) / 4096;
      if (counted[at].second > ur.end) break;  // the rest belongs to the next unit
    }
    unit_chunks_[u].second = int64_t(chunks);
  }
  norm_chunks_ = make_chunk_table(cut);
  if (norm_chunks_.count != (unit_chunks_.empty() ? 0 : unit_chunks_.back().second))
    fail("ParamStore: the norm's chunks do not follow the units");
  norm_summed_.assign(units, 0);
  norm_deferred_.assign(units, 0);
  replicated_ = shard_ranges(true);
  reserve_workspaces();
}

// Set-up: what a step's units take from the pools, made now (no step allocates). ZeRO-2/3: a
// gradient workspace for the unit in backward and one whose reduction is still in flight; ZeRO-3
// also the unit in use, the one prefetched and one being released, fp32 and (16-bit gathers) 16-bit.
// More in flight at once reclaim the oldest reduction's (a stream dependency, no allocation).
void ParamStore::reserve_workspaces() {
  reducer_.reserve(policy_.grads);  // ZeRO-2/3 add each microbatch's reduction into the shard
  size_t n_replicated = 0;
  for (const auto& r : replicated_) n_replicated += r.second - r.first;
  if (layout_.tp().size > 1 && n_replicated) replicated_buf_ = Buffer<float>("replicated_grads", n_replicated);
  std::map<size_t, std::pair<int, int>> units;  // size -> (units of that size, of them 16-bit gathered)
  for (size_t u = 0; u < layout_.units().size(); ++u) {
    auto& c = units[unit(int(u)).range.size()];
    ++c.first;
    c.second += mixed_.sixteen_bit(int(u));
  }
  for (const auto& [n, count] : units) {
    const int grads = policy_.grads ? std::min(count.first, 2) : 0, gathered = policy_.params ? std::min(count.first, 3) : 0;
    pool_.reserve(n, grads + gathered);
    if (policy_.params) pool16_.reserve(n, std::min(count.second, 3));
  }
}

// Shard ranges of the tensors a rank counts in the norm (replicated_only: of the tp-replicated ones),
// neighbours merged.
std::vector<std::pair<size_t, size_t>> ParamStore::shard_ranges(bool replicated_only) const {
  const bool tp_rank0 = layout_.tp().rank == 0;
  std::vector<std::pair<size_t, size_t>> out;
  for (const TensorInfo& t : shards_.shard_tensors()) {
    const bool take = replicated_only ? t.replicated && layout_.tp().size > 1 : !t.replicated || tp_rank0;
    if (!take) continue;
    if (!out.empty() && out.back().second == t.range.begin) out.back().second = t.range.end;
    else out.push_back({t.range.begin, t.range.end});
  }
  return out;
}

ParamStore::~ParamStore() = default;

// ---- workspaces ------------------------------------------------------------------------------

template <>
BufferPool<float>& ParamStore::pool<float>() {
  return pool_;
}
template <>
BufferPool<uint16_t>& ParamStore::pool<uint16_t>() {
  return pool16_;
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

const WorkingCopy& ParamStore::shard_copy() {
  if (shard_copy_stale_) {
    write_working_copy(shard_copy_, vec(param_shard_.data(), shards_.shard_size()));
    shard_copy_stale_ = false;
  }
  return shard_copy_;
}

size_t ParamStore::bucket_gather_bytes(int id) const {
  const Bucket& b = shards_.buckets()[size_t(id)];
  return mixed_.sixteen_bit(b.unit) ? mixed_.bytes(id) : b.range.size() * sizeof(float);
}

void ParamStore::gather_bucket(int id, float* whole, uint16_t* whole16, std::vector<Request>& pending) {
  const Bucket& b = shards_.buckets()[size_t(id)];
  const uint16_t* shard16 = whole16 ? shard_copy().bits.data() : nullptr;
  const double t0 = tracer_.now();
  if (whole16) mixed_.start(id, dp_, shard16, param_shard_.data(), whole16, pending);
  else pending.push_back(dp_.iall_gather(param_shard_.data() + b.shard_offset, whole, b.piece.size(), DType::f32));
  tracer_.record(EventKind::all_gather_issue, step_, id, t0, tracer_.now(), int64_t(bucket_gather_bytes(id)));
}

void ParamStore::start_gather(int u) {
  Gathered& g = gathered_[size_t(u)];
  const Unit& un = unit(u);
  const bool low = mixed_.sixteen_bit(u);
  g.buf = take<float>(un.range.size());
  if (low) g.low = take<uint16_t>(un.range.size());
  for (int id : shards_.buckets_of(u)) {
    const size_t at = shards_.buckets()[size_t(id)].range.begin - un.range.begin;
    gather_bucket(id, g.buf.data() + at, low ? g.low.data() + at : nullptr, g.pending);
  }
}

void ParamStore::wait_gather(int u) {
  Gathered& g = gathered_[size_t(u)];
  if (!g.buf.extent(0)) start_gather(u);
  if (g.pending.empty()) return;
  {
    Tracer::Scope t(tracer_, EventKind::all_gather_wait, step_, u);
    for (Request& r : g.pending) dp_.order_after(r);
    g.pending.clear();
  }
  if (g.low.extent(0))
    for (int id : shards_.buckets_of(u))
      mixed_.finish(id, g.buf.data() + (shards_.buckets()[size_t(id)].range.begin - unit(u).range.begin));
}

const float* ParamStore::params(int u) {
  if (!policy_.params) return params_.data() + unit(u).range.begin;
  wait_gather(u);
  ++gathered_[size_t(u)].refs;
  return gathered_[size_t(u)].buf.data();
}

const uint16_t* ParamStore::low_params(int u) {
  if (policy_.params) {  // valid while the stage holds params(u)
    if (!mixed_.sixteen_bit(u)) return nullptr;
    wait_gather(u);
    return gathered_[size_t(u)].low.data();
  }
  if (copy_.empty()) return nullptr;
  if (copy_stale_) {
    write_working_copy(copy_, vec(params_.data(), params_.extent(0)));
    copy_stale_ = false;
  }
  return copy_.bits.data() + unit(u).range.begin;
}

void ParamStore::prefetch_params(int u) {
  if (policy_.params && u >= 0 && !gathered_[size_t(u)].buf.extent(0)) start_gather(u);
}

void ParamStore::release_params(int u) {
  if (!policy_.params) return;
  Gathered& g = gathered_[size_t(u)];
  if (--g.refs > 0) return;
  give(std::move(g.buf));
  give(std::move(g.low));
  g.buf = Buffer<float>();
  g.low = Buffer<uint16_t>();
  g.refs = 0;
}

// ---- gradients ------------------------------------------------------------------------------

float* ParamStore::grads(int u) {
  if (!policy_.grads) return grads_.data() + unit(u).range.begin;
  Buffer<float>& ws = grad_ws_[size_t(u)];
  if (!ws.extent(0)) {
    ws = take<float>(unit(u).range.size());
    Kokkos::deep_copy(ExecSpace(), ws, 0.0f);
  }
  return ws.data();
}

void ParamStore::grads_done(int u, bool in_forward) {
  if (in_forward != unit(u).grads_final_in_forward()) return;  // more is coming in the other phase
  const bool last = ++done_count_[size_t(u)] == microbatches_;
  if (!policy_.grads) {
    // Whole gradients accumulate over the step's microbatches: reduce after the last one.
    if (!last) return;
    reducer_.reduce(u, grads_.data() + unit(u).range.begin, grad_shard_.data(), false, [this, u]() { sum_norm(u); });
    return;
  }
  // The workspace holds this round's part: reduce it into the shard, recycle it when done.
  Buffer<float> ws = std::move(grad_ws_[size_t(u)]);
  grad_ws_[size_t(u)] = Buffer<float>();
  if (!ws.extent(0)) return;
  reducer_.reduce(u, ws.data(), grad_shard_.data(), true, [this, ws, u, last]() {
    give(ws);
    if (last) sum_norm(u);
  });
}

// The unit's shard gradient is final: its chunks' squares now, while they are in cache. Units that a
// later sync changes (sync_tied, sync_replicated) wait for grad_sum_of_squares.
void ParamStore::sum_norm(int u) {
  if (norm_deferred_[size_t(u)]) return;
  chunk_squares<float>(Vec<float>(grad_shard_.data(), shards_.shard_size()), norm_chunks_,
                       unit_chunks_[size_t(u)].first, unit_chunks_[size_t(u)].second);
  norm_summed_[size_t(u)] = 1;
}

void ParamStore::begin_step(int step, int microbatches) {
  step_ = step;
  microbatches_ = microbatches;
  reducer_.begin_step(step);
  std::fill(done_count_.begin(), done_count_.end(), 0);
  std::fill(norm_summed_.begin(), norm_summed_.end(), 0);
  // The accumulating buffer is the shard (ZeRO-0: the whole gradients; ZeRO-2/3) unless ZeRO-1's
  // reduce-scatter overwrites it from whole gradients; the last update may have zeroed it already.
  if (grads_.extent(0) && !(grads_zeroed_ && grad_shard_.data() == grads_.data())) Kokkos::deep_copy(ExecSpace(), grads_, 0.0f);
  if (policy_.grads && !grads_zeroed_) Kokkos::deep_copy(ExecSpace(), grad_shard_, 0.0f);
  grads_zeroed_ = false;
}

void ParamStore::finish_gradients() {
  if (!policy_.grads)  // a unit no microbatch completed (none in GPT-2's stages, but never lose one)
    for (size_t u = 0; u < done_count_.size(); ++u)
      if (done_count_[u] < microbatches_) {
        done_count_[u] = microbatches_;
        reducer_.reduce(int(u), grads_.data() + unit(int(u)).range.begin, grad_shard_.data(), false);
      }
  for (size_t u = 0; u < grad_ws_.size(); ++u)
    if (grad_ws_[u].extent(0)) grads_done(int(u), unit(int(u)).grads_final_in_forward());
  reducer_.finish();
}

void ParamStore::sync_tied(Communicator& tied) {
  if (tied.size() == 1) return;  // pp = 1, or a middle stage
  // Both ends share wte out alike (ShardLayout), so their shard ranges of it match element by element.
  int u = layout_.unit_index(UnitKind::tied_wte);  // the last stage's copy, or stage 0's own
  if (u < 0) u = layout_.unit_index(UnitKind::wte);
  const Range r = shards_.shard_range(u);
  Tracer::Scope t(tracer_, EventKind::tied_sync, step_, -1, r.size() * sizeof(float) * 2);
  tied.allreduce(grad_shard_.data() + r.begin, r.size(), DType::f32, ReduceOp::sum);
  // Changed after its reduction: counted at the end from now on (the layout is the same every step).
  norm_summed_[size_t(u)] = 0, norm_deferred_[size_t(u)] = 1;
}

void ParamStore::grad_sum_of_squares(DeviceScalar out) {
  for (size_t u = 0; u < norm_summed_.size(); ++u)
    if (!norm_summed_[u]) {
      chunk_squares<float>(Vec<float>(grad_shard_.data(), shards_.shard_size()), norm_chunks_, unit_chunks_[u].first,
                           unit_chunks_[u].second);
      norm_summed_[u] = 1;
    }
  chunk_total(norm_chunks_, out);
}

void ParamStore::sync_replicated(Communicator& tp) {
  if (tp.size() == 1 || replicated_.empty()) return;
  const size_t n = replicated_buf_.extent(0);  // (made at set-up: the ranges' total)
  auto each = [&](bool pack) {
    size_t at = 0;
    for (const auto& r : replicated_) {
      const size_t len = r.second - r.first;
      const Vec<float> shard(grad_shard_.data() + r.first, len), packed(replicated_buf_.data() + at, len);
      if (pack) Kokkos::deep_copy(ExecSpace(), packed, shard);
      else Kokkos::deep_copy(ExecSpace(), shard, packed);
      at += len;
    }
  };
  each(true);
  {
    Tracer::Scope t(tracer_, EventKind::tp_collective, step_, -1, n * sizeof(float) * 2);
    tp.allreduce(replicated_buf_.data(), n, DType::f32, ReduceOp::sum);
  }
  each(false);
  // The units holding replicated tensors changed after their reduction: counted at the end from now on.
  for (size_t u = 0; u < norm_summed_.size(); ++u) {
    const Range ur = shards_.shard_range(int(u));
    for (const auto& r : replicated_)
      if (r.first < ur.end && r.second > ur.begin) norm_summed_[u] = 0, norm_deferred_[u] = 1;
  }
}

void ParamStore::optimizer_step(double lr, GradScale scale) {
  const bool accumulates = !policy_.optimizer || policy_.grads;  // see begin_step
  // The update writes the working copy with the masters: ZeRO-0 the whole one, sharding the shard's.
  opt_->step(vec(param_shard_.data(), shards_.shard_size()), vec(grad_shard_.data(), shards_.shard_size()), lr, scale,
             accumulates, policy_.optimizer ? shard_copy_ : copy_);
  grads_zeroed_ = accumulates;
  shard_copy_stale_ = false;
  if (!policy_.optimizer) copy_stale_ = false;
  if (!policy_.optimizer || policy_.params) return;
  // ZeRO-1/2: every rank's updated pieces back into the whole parameters (a block's matrices into
  // the working copy alone when mixed_ is active).
  auto each_bucket = [&](auto f) {
    for (size_t i = 0; i < shards_.buckets().size(); ++i) f(int(i), shards_.buckets()[i]);
  };
  std::vector<Request> pending;
  each_bucket([&](int id, const Bucket& b) {
    gather_bucket(id, params_.data() + b.range.begin,
                  mixed_.sixteen_bit(b.unit) ? copy_.bits.data() + b.range.begin : nullptr, pending);
  });
  {
    Tracer::Scope t(tracer_, EventKind::all_gather_wait, step_, -1);
    for (Request& r : pending) dp_.order_after(r);
  }
  copy_stale_ = !mixed_.active();  // fp32 gathered: the copy is rounded at its next use
  if (!mixed_.active()) return;
  each_bucket([&](int id, const Bucket& b) {
    if (mixed_.sixteen_bit(b.unit)) mixed_.finish(id, params_.data() + b.range.begin);
  });
  // A unit gathered in fp32 whose weights a GEMM reads: wte, for the LM head of a one-stage model.
  const int head = layout_.has_head() ? layout_.head_wte_unit() : -1;
  if (head >= 0 && !mixed_.sixteen_bit(head)) {
    const Range r = unit(head).range;
    write_working_copy(copy_.slice(r.begin, r.size()), vec(params_.data() + r.begin, r.size()));
  }
}

}  // namespace gpt2
