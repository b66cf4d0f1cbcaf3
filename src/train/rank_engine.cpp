#include "train/rank_engine.hpp"

#include <numeric>

#include "parallel/stage_partition.hpp"
#include "runtime/collective.hpp"
#include "runtime/device_sync.hpp"
#include "tensor/gemm.hpp"
#include "tensor/precision.hpp"

namespace gpt2 {

RankEngine::RankEngine(const RunConfig& cfg, Environment& env, MPI_Comm comm) {
  topo_ = std::make_unique<Topology>(comm, cfg.grid());
  CommContext node;
  node.local_size = env.local_size(), node.local_rank = env.local_rank();
  collective_phase(comm, [&] { groups_ = std::make_unique<CommGroups>(*topo_, cfg.parallel.comm, node); });
}

void RankEngine::build_model(const RunConfig& cfg, Environment& env, Tracer& tracer, const int64_t& step) {
  const auto& p = cfg.parallel;
  mb_size_ = cfg.microbatch_size();
  env.set_blas_threads(p.blas_threads);
  gemm_set_tf32(cfg.train.tf32_on());
  gemm_prepare();  // (the GEMM libraries' handles: their device allocations here, not in step 1)
  plan_.model = std::make_unique<ParamLayout>(cfg.model);
  const ScheduleEntry& schedule = ScheduleRegistry::get(p.schedule, "parallel.schedule");
  Placement& placement = plan_.placement;
  placement = schedule_placement(schedule, p.pp, p.virtual_stages);
  // Blocks per virtual stage: balanced by cost (or as the deck says) with one chunk per rank, an even
  // split with several (the configuration checked that it divides).
  if (placement.chunks == 1)
    plan_.stage_layers = partition_stages(cfg.model, p.pp, cfg.data.seq_len, p.stage_layers);
  else
    plan_.stage_layers.assign(size_t(placement.stages()), cfg.model.n_layer / placement.stages());
  plan_.shard_ranks = p.zero > 0 ? size_t(p.dp) * size_t(p.cp) : 1;  // segments padded to whole rows each
  plan_.tp = topo_->tp();
  const StageLayout stage_layout = plan_.layout_of(topo_->coords());

  OptimizerConfig oc;
  oc.beta1 = cfg.train.beta1, oc.beta2 = cfg.train.beta2, oc.eps = cfg.train.eps;
  oc.weight_decay = cfg.train.weight_decay, oc.lr = cfg.train.lr;
  oc.muon_lr = cfg.train.muon_lr, oc.muon_momentum = cfg.train.muon_momentum, oc.ns_steps = cfg.train.ns_steps;
  oc.ns_bf16 = cfg.train.ns_dtype == ValueType::bf16;
  const double mb = p.bucket_mb > 0 ? p.bucket_mb : groups_->bucket_mb;  // the backend's default
  const size_t bucket = size_t(mb * 1024 * 1024 / sizeof(float));
  store_ = std::make_unique<ParamStore>(stage_layout, groups_->replicas(), zero_policy(p.zero), bucket,
                                       cfg.train.optimizer, oc, tracer,
                                       p.grad_reduce_dtype == ValueType::bf16 ? DType::bf16 : DType::f32, cfg.train.precision,
                                       p.param_gather_dtype == GatherType::automatic, groups_->tp.get());
  tp_group_ = std::make_unique<CommTpGroup>(*groups_->tp, tracer);
  cp_ring_ = std::make_unique<CommCpRing>(*groups_->cp, tracer);
  StageOptions<float> so = stage_options(cfg, tracer, step);
  std::vector<Stage<float>*> chunks;
  for (int c = 0; c < placement.chunks; ++c) {
    so.chunk = c;
    stages_.push_back(std::make_unique<Stage<float>>(stage_layout, mb_size_, cfg.data.seq_len, so));
    chunks.push_back(stages_.back().get());
  }
  // This rank's lists, from the one place that builds (and proves) every rank's.
  PassLists lists = build_pass_lists(cfg.pipeline_shape());
  train_actions_ = std::move(lists.train[size_t(topo_->stage())]);
  eval_actions_ = std::move(lists.eval[size_t(topo_->stage())]);
  exec_ = std::make_unique<PipelineExecutor>(chunks, placement, *groups_->pipe, tracer, schedule.split_backward);
  exec_->reserve(train_actions_, eval_actions_, mb_size_);
}

void RankEngine::run_step(int step, int microbatches, const PipelineExecutor::StepIO& io) {
  store_->begin_step(step, microbatches);
  tp_group_->set_step(step);
  cp_ring_->set_step(step);
  exec_->run(train_actions_, io);
  store_->finish_gradients();
  if (stages_.front()->sequence_parallel()) store_->sync_replicated(*groups_->tp);
  // The embedding and the head share wte; when they are on different ranks, both copies' gradients
  // add up (a V puts both on rank 0).
  if (plan_.tied_apart()) store_->sync_tied(*groups_->tied);
}

StageOptions<float> RankEngine::stage_options(const RunConfig& cfg, Tracer& tracer, const int64_t& step) {
  StageOptions<float> so;
  so.store = store_.get();
  so.tp = tp_group_.get();
  so.cp = cp_ring_.get();
  so.sequence_parallel = cfg.parallel.sequence_parallel && cfg.parallel.tp > 1;
  so.precision = cfg.train.precision, so.recompute = cfg.train.recompute;
  so.recompute_every = cfg.train.recompute_every;
  so.fused_attention = cfg.fused_attention();
  so.document_masks = cfg.document_masks();
  so.loss_chunk_rows = cfg.train.loss_chunk_rows;
  // (The tracer is configured once the initial state is loaded: whether it records is the deck's.)
  if (!cfg.trace.file.empty())
    so.on_recompute = [&tracer, &step, start = 0.0](int unit, bool begin) mutable {
      tracer.fence();
      if (begin) start = tracer.now();
      else tracer.record(EventKind::recompute, int(step), -1, start, tracer.now(), 0, 0, unit);
    };
  if (cfg.trace.units && !cfg.trace.file.empty()) {
    // Unit timings for the performance model's calibration: fenced, so they cover the device work
    // (these steps make a whole-device sync per unit: a calibration trace, not a timed run).
    so.probe = [&tracer, &step, start = 0.0](Pass pass, int unit, bool begin) mutable {
      device_sync("trace.units: a unit's bounds");
      if (begin) {
        start = tracer.now();
        return;
      }
      const EventKind k = pass == Pass::forward           ? EventKind::unit_forward
                          : pass == Pass::backward_weight ? EventKind::unit_backward_weight
                                                          : EventKind::unit_backward;
      tracer.record(k, int(step), -1, start, tracer.now(), 0, 0, unit);
    };
  }
  return so;
}

StageLayout StagePlan::layout_of(const GridCoords& c) const {
  std::vector<BlockRange> chunks;
  for (int ch = 0; ch < placement.chunks; ++ch) {
    const int k = placement.stage(c.pp, ch);
    const int first = std::accumulate(stage_layers.begin(), stage_layers.begin() + k, 0);
    chunks.push_back({first, first + stage_layers[size_t(k)]});
  }
  return StageLayout(*model, chunks, TpSplit{tp, c.tp}, shard_ranks);
}

size_t RankPasses::activation_bytes() const {
  size_t shared = 0;
  for (const auto& s : chunks) shared += s->recompute_bytes();
  return size_t(exec.peak_slots()) * exec.slot_bytes() + shared;
}

}  // namespace gpt2
