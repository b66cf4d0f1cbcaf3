#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "runtime/collective.hpp"
#include "runtime/stop_signals.hpp"
#include "tensor/adamw_update.hpp"
#include "tensor/precision.hpp"
#include "train/nonfinite.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

static_assert(kMaskedTarget < 0, "the loss (tensor/crossentropy.hpp) skips negative targets");

namespace {
// Before any other work: a path that cannot be written is an error naming its key now rather than
// at the first checkpoint or at the end. Rank 0 writes checkpoints and metrics and makes the
// trace's folder; every rank writes its part of the trace, so each checks that it sees that folder
// (a node-local path on a multi-node run does not do). Returns rank 0's hold on checkpoint.dir.
std::unique_ptr<CheckpointDirLock> prepare_outputs(const RunConfig& cfg, const TrainOptions& opts, MPI_Comm comm) {
  const std::string& dir = cfg.checkpoint.dir;
  const std::string& trace = cfg.trace.file;
  const int rank = rank_in(comm);
  std::unique_ptr<CheckpointDirLock> lock;
  collective_phase(comm, [&] {
    if (rank != 0) return;
    if (!dir.empty()) {
      make_dirs(dir, "checkpoint.dir");
      lock = std::make_unique<CheckpointDirLock>(dir, "checkpoint.dir");
    }
    prepare_output_file(trace, "trace.file");
    if (!trace.empty()) AtomicFile probe(trace);  // fails now if it cannot be written
    prepare_output_file(opts.metrics_jsonl, "--metrics-jsonl");
  });
  collective_phase(comm, [&] {
    if (!trace.empty() && !writable_folder(parent_folder(trace)))
      fail_input("trace.file", "rank ", rank, " cannot write in ", parent_folder(trace),
                 " (every rank writes its part of the trace: the folder must be shared and writable)");
  });
  return lock;
}
}  // namespace

Trainer::Trainer(RunConfig cfg, Environment& env, TrainOptions opts, MPI_Comm comm)
    : cfg_(std::move(cfg)), opts_(std::move(opts)) {
  collective_phase(comm, [&] { cfg_.validate(size_of(comm)); });
  std::unique_ptr<CheckpointDirLock> lock = prepare_outputs(cfg_, opts_, comm);
  engine_ = std::make_unique<RankEngine>(cfg_, env, comm);
  collective_phase(comm, [&] { data_ = std::make_unique<TrainData>(cfg_); });
  collective_phase(comm, [&] { engine_->build_model(cfg_, env, tracer_, state_.step); });
  sums_ = std::make_unique<LossSums>(engine_->values(), engine_->microbatch_size(), cfg_, tracer_);
  gather_ = std::make_unique<ModelGather>(engine_->values(), cfg_);
  state_.loss_scale = LossScale(cfg_.train.precision == Precision::fp16, cfg_.train.initial_loss_scale, cfg_.train.loss_scale_window);
  state_.sample_rng = Rng(uint64_t(cfg_.train.seed), 77);
  lr_.kind = cfg_.train.schedule;
  lr_.lr = cfg_.train.lr, lr_.min_lr = cfg_.train.min_lr;
  lr_.warmup_steps = cfg_.train.warmup_steps, lr_.total_steps = cfg_.train.steps;
  collective_phase(comm, [&] {
    evaluator_ = std::make_unique<Evaluator>(cfg_, engine_->passes(), engine_->topo(), *data_, *sums_, tracer_, state_,
                                             *gather_);
  });
  checkpointer_ = std::make_unique<Checkpointer>(cfg_, engine_->values(), tracer_, state_, *gather_, std::move(lock));
  reporter_ = std::make_unique<Reporter>(cfg_, opts_, env, engine_->values(), engine_->passes(), *data_, state_, *gather_,
                                         tracer_);
  checkpointer_->load_initial_state();
  collective_phase(comm, [&] { reporter_->open_log(); });
  tracer_.configure(!cfg_.trace.file.empty(), cfg_.trace.max_events, cfg_.trace.sync, engine_->topo().stage());
  tracer_.sync_clock(*engine_->groups().world);
}

Trainer::~Trainer() = default;

StepMetrics Trainer::train_step() {
  const int step = int(state_.step);
  Tracer::Scope scope(tracer_, EventKind::step, step);
  const WaitContext context([step] { return "training step " + std::to_string(step + 1); });
  counts_.begin_step();
  tracer_.take_pass_times();  // (what ran between steps is not the step's)
  const double t0 = tracer_.now();
  RankEngine& e = *engine_;
  const int m_count = cfg_.parallel.microbatches;
  PipelineExecutor::StepIO io;
  io.step = step;
  io.microbatch_size = e.microbatch_size();
  io.load = [&](int mb, Activations<float>& a) { data_->load_microbatch(data_->train(), step, mb, e.topo(), a); };
  io.losses = sums_->token_losses();
  // The loss is the mean over the global batch's counted targets (all B*T of plain text; a
  // translation pair's target only): each token's loss gradient is 1/counted. The dp x cp replicas'
  // gradients are averaged, so each starts at dp * cp / counted (the cp ranks hold parts of the same
  // sequences). counted comes from the data, the same on every rank. Under fp16 the loss gradient
  // starts multiplied by the loss scale (and the gradients are divided by it again before the norm,
  // clipping and the update).
  const double scale = state_.loss_scale.scale();
  const int64_t counted = data_->train().counted_tokens(step);
  io.dloss = float(scale * cfg_.parallel.dp * e.topo().cp() / double(std::max<int64_t>(counted, 1)));
  io.need_grad = true;
  e.run_step(step, m_count, io);

  sums_->reduce(m_count, true, step);
  StepMetrics m;
  m.step = step + 1;
  m.lr = learning_rate(lr_, step);
  m.loss_scale = scale;
  update(m, counted);
  ++state_.step;
  counts_.end_step();
  const double dt = tracer_.now() - t0;
  m.step_ms = dt * 1e3;
  const Tracer::PassTimes times = tracer_.take_pass_times();
  m.compute_ms = times.compute * 1e3, m.wait_ms = times.wait * 1e3;
  m.tokens_per_s = double(cfg_.train.batch_size) * cfg_.data.seq_len / dt;
  m.rank_tokens_per_s = m.tokens_per_s / (cfg_.parallel.dp * e.topo().cp());
  return m;
}

// train.nonfinite = "skip" and fp16's loss scaling decide on the update from the step's loss and
// gradient norm: the host reads them first. Otherwise they stay on the device until the update is
// queued (a non-finite step then stops the run before anything saves its state).
void Trainer::update(StepMetrics& m, int64_t counted) {
  const int step = int(state_.step);
  const double scale = m.loss_scale;
  const bool skip_mode = cfg_.train.nonfinite == NonFinitePolicy::skip;
  const bool scaled = state_.loss_scale.dynamic();
  LossSums::Values sums;
  if (skip_mode || scaled) sums = sums_->read(counted, step);
  // An fp16 overflow: a finite loss with a non-finite gradient (the norm is all-reduced, so every
  // rank sees the same). A non-finite loss is the forward's own trouble: train.nonfinite decides.
  const bool overflow = scaled && std::isfinite(sums.loss) && !std::isfinite(sums.grad_norm);
  if (scaled) sums.grad_norm /= scale;
  m.skipped = overflow || (skip_mode && !nonfinite_values(sums.loss, sums.grad_norm).empty());
  if (!m.skipped) {
    Tracer::Scope t(tracer_, EventKind::optimizer, step);
    // fp16: the gradients are unscaled on the fly with the clipping factor of their true norm.
    const GradScale gs = scaled ? GradScale(clip_factor(sums.grad_norm, cfg_.train.grad_clip) / scale)
                                : GradScale::clip(sums_->squares(), cfg_.train.grad_clip);
    engine_->store().optimizer_step(m.lr, gs);
  }
  state_.loss_scale.update(overflow);
  if (!skip_mode && !scaled) sums = sums_->read(counted, step);
  m.loss = sums.loss;
  m.grad_norm = sums.grad_norm;
}

// Did any rank get a stop signal? One int all-reduced per step (about 7 us on 2 ranks of one node):
// every rank leaves after the same step.
int Trainer::stop_signal() {
  const int64_t step = state_.step;
  const WaitContext context([step] { return "agreeing on stop signals after step " + std::to_string(step); });
  return engine_->groups().world->host_max(int32_t(StopSignals::pending()));
}

// The steps since the last checkpoint are saved: this is what the signal's grace is for.
void Trainer::save_on_stop(int signal, int64_t first) {
  const std::string& dir = cfg_.checkpoint.dir;
  const int64_t step = state_.step;
  if (!dir.empty() && step > first && step != checkpointer_->saved_step()) save_checkpoint();
  const int64_t saved = checkpointer_->saved_step();
  end_message_ = std::string("stopped by ") + StopSignals::name(signal) + " after step " + std::to_string(step) + ": " +
                 (dir.empty()  ? std::string("no checkpoint.dir, nothing saved")
                  : saved >= 0 ? "resume from " + dir + "/" + checkpoint_name(saved, cfg_.checkpoint.format) +
                                     " with checkpoint.resume = \"auto\""
                               : std::string("no step done, nothing to save"));
}

// After a step that did not diverge: samples, BLEU, and the checkpoint (with the trace so far) due now.
void Trainer::after_step(StepMetrics& m, bool last) {
  reporter_->maybe_sample();
  if (std::optional<BleuReport> r = evaluator_->after_step(m, last)) reporter_->bleu(*r);
  const auto& ck = cfg_.checkpoint;
  if (ck.dir.empty() || !((ck.every > 0 && state_.step % ck.every == 0) || last)) return;
  checkpointer_->save();
  if (last) checkpointer_->complete();  // (so that the trace holds its write)
  write_trace();
}

RunEnd Trainer::run() {
  const auto& t = cfg_.train;
  reporter_->begin_run();
  const int64_t first = state_.step;
  const int64_t end = opts_.stop_at > 0 ? std::min<int64_t>(opts_.stop_at, t.steps) : t.steps;
  RunEnd how = RunEnd::completed;
  int signal = stop_signal();  // (one that came during the set-up: no step at all)
  while (state_.step < end) {
    if (signal != 0) {
      how = RunEnd::stopped;
      break;
    }
    StepMetrics m = train_step();
    signal = stop_signal();  // here the ranks are together (the step's sums were just all-reduced)
    checkpointer_->poll();
    // The loss and gradient norm are global (all-reduced): every rank sees the same values.
    const std::string bad = nonfinite_values(m.loss, m.grad_norm);
    if (!bad.empty() && !m.skipped) {
      how = RunEnd::diverged;
      end_message_ = "step " + std::to_string(m.step) + ": non-finite " + bad + ": the run diverged; stopped " +
                     "without saving this state (train.nonfinite = \"stop\"; \"skip\" skips such updates)";
    }
    const bool last = state_.step == end;
    if (data_->val() && how != RunEnd::diverged && ((t.eval_every > 0 && state_.step % t.eval_every == 0) || last))
      m.val_loss = evaluate();
    reporter_->step(m, bad, last);
    if (how == RunEnd::diverged) break;
    after_step(m, last);
  }
  if (how == RunEnd::stopped) save_on_stop(signal, first);
  checkpointer_->complete();  // (checkpoint.async: the run ends when its last checkpoint is in place)
  if (how != RunEnd::completed || cfg_.checkpoint.dir.empty() || state_.step == first) write_trace();
  reporter_->summary();
  warn_device_events();
  return how;
}

// A step that allocated or waited on the host beyond its one whole-device wait runs slower on a GPU
// than it should: say so, with what the first such step did (the trace's /meta has the counts).
void Trainer::warn_device_events() const {
  const std::vector<std::string>& events = counts_.events();
  if (events.empty()) return;
  const int rank = engine_->groups().world->rank();
  const DeviceCounters& c = counts_.maxima();
  std::string what;
  for (const std::string& e : events) what += "\n  " + e;
  std::fprintf(stderr,
               "gpt2: rank %d: a training step allocated or waited on the host beyond its one whole-device wait (on "
               "a GPU each is a stall; the most in one step: %llu whole-device waits, %llu other host waits, %llu "
               "allocations, %llu frees); step %lld was the first, and did:%s\n",
               rank, (unsigned long long)c.device_waits, (unsigned long long)c.other_host_waits(),
               (unsigned long long)c.allocations, (unsigned long long)c.frees, (long long)counts_.first_step(),
               what.c_str());
}

}  // namespace gpt2
