// ParamStore (parallel/param_store.hpp): its layout, the parameters served unit by unit and the
// gradients reduced as units complete (by its two strategies), the norm and the update. Its state as
// a whole -- initialisation, checkpoint sections, memory -- is in param_store_state.cpp.
#include "parallel/param_store.hpp"

#include "core/error.hpp"
#include "parallel/matrix_shards.hpp"

namespace gpt2 {

ParamStore::ParamStore(const StageLayout& layout, Communicator& dp, ShardPolicy policy, size_t bucket_elems,
                       const std::string& optimizer, const OptimizerConfig& oc, Tracer& tracer, DType grad_wire,
                       Precision working, bool gather16, Communicator* tp)
    : layout_(layout),
      policy_(policy),
      shards_(layout_, policy.optimizer ? dp.size() : 1, policy.optimizer ? dp.rank() : 0, bucket_elems),
      reducer_(dp, shards_,
               policy.optimizer ? GradientReducer::Mode::reduce_scatter : GradientReducer::Mode::all_reduce, tracer,
               grad_wire),
      copies_(layout_, shards_, working, !policy.params, policy.optimizer && gather16),
      norm_(layout_, shards_),
      replicated_(layout_, shards_),
      workspaces_(reducer_),
      parts_{layout_, shards_, dp, tracer, reducer_, copies_, norm_, workspaces_, shard_, now_.step} {
  // The shard; without a sharded update it is the whole layout, which the strategies keep.
  const size_t n = layout_.local_size(), s = shards_.shard_size();
  shard_.params = Buffer<float>(std::string(policy_.optimizer ? "param_shard" : "params"), s);
  shard_.grads = Buffer<float>(std::string(policy_.optimizer ? "grad_shard" : "grads"), s);
  const bool whole_params = !policy_.params, whole_grads = !policy_.grads;
  params_ = make_param_source(policy_, parts_,
                              !whole_params ? Buffer<float>() : policy_.optimizer ? Buffer<float>("params", n) : shard_.params);
  grads_ = make_grad_sink(policy_, parts_,
                          !whole_grads ? Buffer<float>() : policy_.optimizer ? Buffer<float>("grads", n) : shard_.grads);
  // An optimizer of whole matrices gets them from their parts when the ranks hold parts.
  const bool split = shards_.ranks() > 1 || layout_.tp().size > 1;
  if (split && OptimizerRegistry::get(optimizer, "train.optimizer").whole_matrices) {
    if (layout_.tp().size > 1 && (!tp || tp->size() != layout_.tp().size))
      fail("ParamStore: ", optimizer, " needs the tensor-parallel group");
    matrices_ = std::make_unique<CommMatrixShards>(layout_, shards_, dp, *tp);
  }
  opt_ = make_optimizer(optimizer, shards_.optimizer_shards(), s, oc, matrices_.get());
}

ParamStore::~ParamStore() = default;

// ---- the stage's units ------------------------------------------------------------------------

const float* ParamStore::params(int u) { return params_->params(u); }
const uint16_t* ParamStore::low_params(int u) { return params_->low_params(u); }
void ParamStore::prefetch_params(int u) { params_->prefetch(u); }
void ParamStore::release_params(int u) { params_->release(u); }
float* ParamStore::grads(int u) { return grads_->grads(u); }

void ParamStore::grads_done(int u, bool in_forward) {
  if (in_forward != unit(u).grads_final_in_forward()) return;  // more is coming in the other phase
  grads_->done(u);
}

// ---- the step ---------------------------------------------------------------------------------

void ParamStore::begin_step(int step, int microbatches) {
  now_.step = step;
  reducer_.begin_step(step);
  norm_.begin_step();
  grads_->begin_step(microbatches, now_.grads_zeroed);
  now_.grads_zeroed = false;
}

void ParamStore::finish_gradients() {
  grads_->finish();
  reducer_.finish();
}

void ParamStore::sync_tied(Communicator& tied) {
  if (tied.size() == 1) return;  // pp = 1, or a middle stage
  // Both ends share wte out alike (ShardLayout), so their shard ranges of it match element by element.
  int u = layout_.unit_index(UnitKind::tied_wte);  // the last stage's copy, or stage 0's own
  if (u < 0) u = layout_.unit_index(UnitKind::wte);
  const Range r = shards_.shard_range(u);
  Tracer::Scope t(parts_.tracer, EventKind::tied_sync, now_.step, -1, r.size() * sizeof(float) * 2);
  tied.allreduce(shard_.grads.data() + r.begin, r.size(), DType::f32, ReduceOp::sum);
  norm_.defer(u);  // changed after its reduction: counted at the end from now on
}

void ParamStore::grad_sum_of_squares(DeviceScalar out) { norm_.total(shard_vec(shard_.grads), out); }

void ParamStore::sync_replicated(Communicator& tp) {
  replicated_.sync(tp, shard_.grads.data(), parts_.tracer, now_.step);
  if (tp.size() == 1) return;
  // The units holding replicated tensors changed after their reduction: counted at the end from now on.
  for (size_t u = 0; u < layout_.units().size(); ++u)
    if (replicated_.touches(shards_.shard_range(int(u)))) norm_.defer(int(u));
}

void ParamStore::optimizer_step(double lr, GradScale scale) {
  const bool zeroes = grads_->zeroed_by_update();
  // The update writes the working copy with the masters: ZeRO-0 the whole one, sharding the shard's.
  opt_->step({shards_.optimizer_shards(), shard_vec(shard_.params), shard_vec(shard_.grads),
              copies_.optimizer_target(policy_.optimizer)},
             {lr, scale, zeroes, zeroes ? &grads_->kept() : nullptr});
  now_.grads_zeroed = zeroes;
  params_->updated();
}

}  // namespace gpt2
