#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "parallel/stage_partition.hpp"
#include "runtime/collective.hpp"
#include "runtime/device_sync.hpp"
#include "tensor/adamw_update.hpp"
#include "tensor/gemm.hpp"
#include "tensor/precision.hpp"
#include "train/nonfinite.hpp"

namespace gpt2 {

static_assert(kMaskedTarget < 0, "the loss (tensor/crossentropy.hpp) skips negative targets");

Trainer::Trainer(RunConfig cfg, Environment& env, TrainOptions opts, MPI_Comm comm)
    : cfg_(std::move(cfg)), env_(env), comm_(comm), rank_(rank_in(comm)), size_(size_of(comm)),
      opts_(std::move(opts)) {
  collective_phase(comm_, [&] { cfg_.validate(size_); });
  prepare_outputs();
  topo_ = std::make_unique<Topology>(comm_, cfg_.grid());
  collective_phase(comm_, [&] { groups_ = std::make_unique<CommGroups>(*topo_, cfg_.parallel.comm, env_.local_size()); });
  collective_phase(comm_, [&] { setup_data(); });
  collective_phase(comm_, [&] { setup_model(); });
  collective_phase(comm_, [&] { setup_bleu(); });
  load_initial_state();
  tracer_.configure(!cfg_.trace.file.empty(), cfg_.trace.max_events, cfg_.trace.sync, topo_->stage());
  tracer_.sync_clock(*groups_->world);
}

Trainer::~Trainer() = default;

void Trainer::setup_data() {
  const auto& d = cfg_.data;
  const int V = cfg_.model.vocab_size;
  train_data_ = std::make_unique<TokenDataset>(d.train, "data.train", d.seq_len, V);
  train_loader_ = std::make_unique<DataLoader>(*train_data_, cfg_.train.batch_size, d.shuffle,
                                               uint64_t(cfg_.train.seed), "data.train");
  if (!d.val.empty()) {
    val_data_ = std::make_unique<TokenDataset>(d.val, "data.val", d.seq_len, V);
    val_loader_ = std::make_unique<DataLoader>(*val_data_, cfg_.train.batch_size, false, 0, "data.val");
  }
  const int64_t per_rank = cfg_.train.batch_size / cfg_.parallel.dp;
  mb_size_ = int(per_rank / cfg_.parallel.microbatches);
  host_inputs_.resize(size_t(mb_size_) * d.seq_len);
  host_targets_.resize(host_inputs_.size());
}

void Trainer::setup_model() {
  const auto& p = cfg_.parallel;
  blas_threads_ = env_.set_blas_threads(p.blas_threads);
  gemm_set_tf32(cfg_.train.tf32);
  layout_ = std::make_unique<ParamLayout>(cfg_.model);
  const ScheduleEntry& schedule = ScheduleRegistry::get(p.schedule, "parallel.schedule");
  placement_ = schedule_placement(schedule, p.pp, p.virtual_stages);
  // Blocks per virtual stage: balanced by cost (or as the deck says) with one chunk per rank, an even
  // split with several (the configuration checked that it divides).
  if (placement_.chunks == 1)
    stage_layers_ = partition_stages(cfg_.model, p.pp, cfg_.data.seq_len, p.stage_layers);
  else
    stage_layers_.assign(size_t(placement_.stages()), cfg_.model.n_layer / placement_.stages());
  const int s = topo_->stage();
  const StageLayout stage_layout = layout_of(topo_->coords());

  OptimizerConfig oc;
  oc.beta1 = cfg_.train.beta1, oc.beta2 = cfg_.train.beta2, oc.eps = cfg_.train.eps;
  oc.weight_decay = cfg_.train.weight_decay;
  const double mb = p.bucket_mb > 0 ? p.bucket_mb : groups_->bucket_mb;  // the backend's default
  const size_t bucket = size_t(mb * 1024 * 1024 / sizeof(float));
  Precision precision = Precision::fp32;
  parse_precision(cfg_.train.precision, precision);
  store_ = std::make_unique<ParamStore>(stage_layout, groups_->replicas(), zero_policy(p.zero), bucket,
                                        cfg_.train.optimizer, oc, tracer_,
                                        p.grad_reduce_dtype == "bf16" ? DType::bf16 : DType::f32, precision,
                                        p.param_gather_dtype == "auto");
  tp_group_ = std::make_unique<CommTpGroup>(*groups_->tp, tracer_);
  cp_ring_ = std::make_unique<CommCpRing>(*groups_->cp, tracer_);
  StageOptions<float> so;
  so.store = store_.get();
  so.tp = tp_group_.get();
  so.cp = cp_ring_.get();
  so.sequence_parallel = p.sequence_parallel && p.tp > 1;
  so.precision = precision;
  parse_recompute(cfg_.train.recompute, so.recompute);
  so.recompute_every = cfg_.train.recompute_every;
  if (tracer_.enabled())
    so.on_recompute = [this, start = 0.0](int unit, bool begin) mutable {
      tracer_.fence();
      if (begin) start = tracer_.now();
      else tracer_.record(EventKind::recompute, int(step_), -1, start, tracer_.now(), 0, 0, unit);
    };
  loss_scale_ = LossScale(so.precision == Precision::fp16, cfg_.train.initial_loss_scale, cfg_.train.loss_scale_window);
  if (cfg_.trace.units && !cfg_.trace.file.empty()) {
    // Unit timings for the performance model's calibration: fenced, so they cover the device work
    // (these steps make a whole-device sync per unit: a calibration trace, not a timed run).
    so.probe = [this, start = 0.0](Pass pass, int unit, bool begin) mutable {
      device_sync("trace.units: a unit's bounds");
      if (begin) {
        start = tracer_.now();
        return;
      }
      const EventKind k = pass == Pass::forward           ? EventKind::unit_forward
                          : pass == Pass::backward_weight ? EventKind::unit_backward_weight
                                                          : EventKind::unit_backward;
      tracer_.record(k, int(step_), -1, start, tracer_.now(), 0, 0, unit);
    };
  }
  std::vector<Stage<float>*> chunks;
  for (int c = 0; c < placement_.chunks; ++c) {
    so.chunk = c;
    stages_.push_back(std::make_unique<Stage<float>>(stage_layout, mb_size_, cfg_.data.seq_len, so));
    chunks.push_back(stages_.back().get());
  }

  // This rank's lists, from the one place that builds (and proves) every rank's.
  PassLists lists = build_pass_lists(cfg_.pipeline_shape());
  train_actions_ = std::move(lists.train[size_t(s)]);
  eval_actions_ = std::move(lists.eval[size_t(s)]);
  exec_ = std::make_unique<PipelineExecutor>(chunks, placement_, *groups_->pipe, tracer_, schedule.split_backward);
  if (stage_layout.has_head())
    losses_ = Buffer<float>("losses", size_t(p.microbatches) * mb_size_ * cfg_.data.seq_len);
  step_sums_ = std::make_unique<StepSums>(*groups_);

  lr_.kind = cfg_.train.schedule;
  lr_.lr = cfg_.train.lr, lr_.min_lr = cfg_.train.min_lr;
  lr_.warmup_steps = cfg_.train.warmup_steps, lr_.total_steps = cfg_.train.steps;
  sample_rng_ = Rng(uint64_t(cfg_.train.seed), 77);
}

StageLayout Trainer::layout_of(const GridCoords& c) const {
  std::vector<BlockRange> chunks;
  for (int ch = 0; ch < placement_.chunks; ++ch) {
    const int k = placement_.stage(c.pp, ch);
    const int first = std::accumulate(stage_layers_.begin(), stage_layers_.begin() + k, 0);
    chunks.push_back({first, first + stage_layers_[size_t(k)]});
  }
  return StageLayout(*layout_, chunks, TpSplit{topo_->tp(), c.tp});
}

// The microbatch's sequences of this dp rank; with context parallelism, this rank's tokens of each
// (its chunks i and 2cp-1-i: the Stage's local rows).
void Trainer::load_microbatch(DataLoader& loader, int64_t batch, int mb, Activations<float>& a) {
  const int64_t row0 = int64_t(topo_->dp_rank()) * (cfg_.train.batch_size / cfg_.parallel.dp) +
                       int64_t(mb) * mb_size_;
  loader.load(batch, row0, mb_size_, host_inputs_.data(), host_targets_.data());
  const int cp = topo_->cp();
  if (cp > 1) {
    const int T = cfg_.data.seq_len, Tl = T / cp, L = Tl / 2, i = topo_->cp_rank();
    // In place: local row (b, j) comes from a position at or after it, b * T + t >= b * Tl + j, and
    // rows are taken in increasing order (chunk i, then chunk 2cp-1-i >= i), so no source is
    // overwritten before it is read.
    int* in = host_inputs_.data();
    int* tg = host_targets_.data();
    for (int b = 0; b < mb_size_; ++b)
      for (int j = 0; j < Tl; ++j) {
        const int t = j < L ? i * L + j : (2 * cp - 1 - i) * L + (j - L);
        in[size_t(b) * Tl + j] = in[size_t(b) * T + t];
        tg[size_t(b) * Tl + j] = tg[size_t(b) * T + t];
      }
  }
  a.load(host_inputs_.data(), host_targets_.data());
}

void Trainer::record_steady_counts(const DeviceCounters& c) {
  DeviceCounters& m = step_counts_;
  if (c.allocations > 0 && step_allocations_.empty()) {  // the step's own: the newest c.allocations
    step_allocations_ = recent_allocations();
    if (step_allocations_.size() > c.allocations) step_allocations_.erase(step_allocations_.begin(), step_allocations_.end() - long(c.allocations));
  }
  m.device_waits = std::max(m.device_waits, c.device_waits);
  m.stream_waits = std::max(m.stream_waits, c.stream_waits);
  m.host_waits = std::max(m.host_waits, c.host_waits);
  m.allocations = std::max(m.allocations, c.allocations);
  m.frees = std::max(m.frees, c.frees);
  m.deep_copies = std::max(m.deep_copies, c.deep_copies);
}

StepMetrics Trainer::train_step() {
  Tracer::Scope scope(tracer_, EventKind::step, int(step_));
  const WaitContext context([this] { return "training step " + std::to_string(step_ + 1); });
  const DeviceCounters counts0 = device_counters();
  const double t0 = tracer_.now();
  const int T = cfg_.data.seq_len;
  store_->begin_step(int(step_), cfg_.parallel.microbatches);
  tp_group_->set_step(int(step_));
  cp_ring_->set_step(int(step_));
  PipelineExecutor::StepIO io;
  io.step = int(step_);
  io.microbatch_size = mb_size_;
  io.load = [&](int mb, Activations<float>& a) { load_microbatch(*train_loader_, step_, mb, a); };
  io.losses = Vec<float>(losses_.data(), losses_.extent(0));
  // The loss is the mean over the global batch's counted targets (all B*T of plain text; a
  // translation pair's target only): each token's loss gradient is 1/counted. The dp x cp replicas'
  // gradients are averaged, so each starts at dp * cp / counted (the cp ranks hold parts of the same
  // sequences). counted comes from the data, the same on every rank. Under fp16 the loss gradient
  // starts multiplied by the loss scale (and the gradients are divided by it again before the norm,
  // clipping and the update).
  const double scale = loss_scale_.scale();
  const int64_t counted = train_loader_->counted_tokens(step_);
  io.dloss = float(scale * cfg_.parallel.dp * topo_->cp() / double(std::max<int64_t>(counted, 1)));
  io.need_grad = true;
  exec_->run(train_actions_, io);
  store_->finish_gradients();
  if (stage().sequence_parallel()) store_->sync_replicated(*groups_->tp);
  // The embedding and the head share wte; when they are on different ranks, both copies' gradients
  // add up (a V puts both on rank 0).
  if (placement_.rank_of(0) != placement_.rank_of(placement_.stages() - 1)) store_->sync_tied(*groups_->tied);

  reduce_step_sums(cfg_.parallel.microbatches, true);
  StepMetrics m;
  m.step = int(step_ + 1);
  m.lr = learning_rate(lr_, int(step_));
  m.loss_scale = scale;
  // train.nonfinite = "skip" and fp16's loss scaling decide on the update from the step's loss and
  // gradient norm: the host reads them first. Otherwise they stay on the device until the update is
  // queued (a non-finite step then stops the run before anything saves its state).
  const bool skip_mode = nonfinite_policy(cfg_.train.nonfinite) == NonFinitePolicy::skip;
  const bool scaled = loss_scale_.dynamic();
  StepValues sums;
  if (skip_mode || scaled) sums = read_step_sums(counted);
  // An fp16 overflow: a finite loss with a non-finite gradient (the norm is all-reduced, so every
  // rank sees the same). A non-finite loss is the forward's own trouble: train.nonfinite decides.
  const bool overflow = scaled && std::isfinite(sums.loss) && !std::isfinite(sums.grad_norm);
  if (scaled) sums.grad_norm /= scale;
  m.skipped = overflow || (skip_mode && !nonfinite_values(sums.loss, sums.grad_norm).empty());
  skipped_ += m.skipped;
  if (!m.skipped) {
    Tracer::Scope t(tracer_, EventKind::optimizer, int(step_));
    // fp16: the gradients are unscaled on the fly with the clipping factor of their true norm.
    const GradScale gs = scaled ? GradScale(clip_factor(sums.grad_norm, cfg_.train.grad_clip) / scale)
                                : GradScale::clip(step_sums_->squares(), cfg_.train.grad_clip);
    store_->optimizer_step(m.lr, gs);
  }
  loss_scale_.update(overflow);
  if (!skip_mode && !scaled) sums = read_step_sums(counted);
  m.loss = sums.loss;
  m.grad_norm = sums.grad_norm;
  ++step_;
  // Steady state: every step but this process's first (which sizes the workspaces).
  if (steps_run_++ > 0) record_steady_counts(device_counters() - counts0);
  const double dt = tracer_.now() - t0;
  m.step_ms = dt * 1e3;
  m.tokens_per_s = double(cfg_.train.batch_size) * T / dt;
  m.rank_tokens_per_s = m.tokens_per_s / (cfg_.parallel.dp * topo_->cp());
  return m;
}

void Trainer::reduce_step_sums(int microbatches_run, bool with_grad_norm) {
  const size_t tokens = size_t(microbatches_run) * mb_size_ * (cfg_.data.seq_len / topo_->cp());  // this rank's
  // Only the head stage has token losses; the others contribute 0 to the sum over stages.
  const bool head = stage().layout().has_head();
  sum_of<float>(Vec<float>(losses_.data(), head ? tokens : 0), DeviceScalar(step_sums_->loss_sum()));
  if (with_grad_norm) store_->grad_sum_of_squares(DeviceScalar(step_sums_->squares()));
  Tracer::Scope t(tracer_, EventKind::scalar_sync, int(step_));
  step_sums_->reduce(head, with_grad_norm, store_->grads_sharded());
}

Trainer::StepValues Trainer::read_step_sums(int64_t counted_tokens) {
  StepSums::Values v;
  {
    Tracer::Scope t(tracer_, EventKind::scalar_sync, int(step_));
    v = step_sums_->read();
  }
  StepValues s;
  s.loss = v.loss_sum / double(std::max<int64_t>(counted_tokens, 1));
  s.grad_norm = std::sqrt(v.squares);
  return s;
}

double Trainer::evaluate() {
  if (!val_loader_) return -1;
  Tracer::Scope scope(tracer_, EventKind::eval, int(step_));
  const int batches = int(std::min<int64_t>(cfg_.train.eval_batches, val_loader_->batches_per_epoch()));
  const int m = cfg_.parallel.microbatches;
  double total = 0;
  for (int k = 0; k < batches; ++k) {
    const WaitContext context([this, k] {
      return "evaluation after step " + std::to_string(step_) + ", validation batch " + std::to_string(k + 1);
    });
    PipelineExecutor::StepIO io;
    io.step = int(step_);
    io.microbatch_size = mb_size_;
    io.load = [&](int mb, Activations<float>& a) { load_microbatch(*val_loader_, k, mb, a); };
    io.losses = Vec<float>(losses_.data(), losses_.extent(0));
    io.need_grad = false;
    exec_->run(eval_actions_, io);
    reduce_step_sums(m, false);
    total += read_step_sums(val_loader_->counted_tokens(k)).loss;
  }
  return batches > 0 ? total / batches : -1;
}

}  // namespace gpt2
