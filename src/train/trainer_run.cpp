// Trainer: the run loop (steps, evaluations, samples, checkpoints; stop signals and non-finite
// steps end it early) and the trace.
#include <cmath>
#include <cstdio>

#include "pipeline/simulator.hpp"
#include "runtime/stop_signals.hpp"
#include "tensor/gemm_lowp.hpp"
#include "trace/hdf5_trace.hpp"
#include "train/nonfinite.hpp"
#include "train/trainer.hpp"

namespace gpt2 {

void Trainer::write_trace() {
  if (cfg_.trace.file.empty()) return;
  TraceMeta meta;
  meta.config_toml = cfg_.toml();
  meta.world_size = topo_->world_size();
  meta.grid = topo_->shape();
  meta.coords = topo_->coords();
  meta.host = env_.host(), meta.local_rank = env_.local_rank();
  meta.microbatches = cfg_.parallel.microbatches;
  meta.schedule = cfg_.parallel.schedule;
  meta.recompute = cfg_.train.recompute, meta.recompute_every = cfg_.train.recompute_every;
  meta.virtual_stages = placement_.chunks;
  // Equal stages, each pass costing what the model's shape says (forward 1, B and W adding up to 2):
  // the schedule's own bubble, as the trainer ordered it.
  const PassCosts pc = cfg_.pass_costs();
  meta.bubble_theory = simulate_schedule(cfg_.parallel.schedule, topo_->pp(), cfg_.parallel.microbatches,
                                         cfg_.parallel.virtual_stages, sim_costs(pc), pc)
                           .bubble_fraction;
  meta.execution_space = env_.execution_space();
  meta.device = env_.device();
  meta.comm = groups_->backend;
  meta.blas_threads = blas_threads_;
  meta.host_threads = env_.host_threads();
  meta.stage_layers = stage_layers_;
  meta.tokens_per_step = cfg_.train.batch_size * cfg_.data.seq_len;
  meta.num_params = int64_t(layout_->total());
  meta.model = cfg_.model;
  meta.seq_len = cfg_.data.seq_len;
  meta.batch_size = cfg_.train.batch_size;
  const MemoryUse mem = memory();
  meta.param_bytes = double(mem.params), meta.grad_bytes = double(mem.grads), meta.optimizer_bytes = double(mem.optimizer);
  meta.workspace_bytes = double(store_->peak_workspace_bytes());
  meta.zero = cfg_.parallel.zero;
  meta.stage_param_bytes = double(stage_layout().local_size() * sizeof(float));
  meta.param_gather_bytes = double(store_->gather_bytes());
  meta.activation_bytes = double(activation_bytes());
  meta.peak_microbatches = double(exec_->peak_slots());
  if (device_counters_installed()) {
    meta.device_waits_per_step = double(step_counts_.device_waits);
    meta.allocations_per_step = double(step_counts_.allocations + step_counts_.frees);
    meta.host_waits_per_step = double(step_counts_.host_waits);
    meta.stream_waits_per_step = double(step_counts_.stream_waits);
  }
  meta.event_timing = cfg_.trace.sync ? "fenced per event" : cfg_.trace.units ? "fenced per unit" : "host issue times";
  meta.steps = cfg_.train.steps;
  meta.batches_per_epoch = train_loader_->batches_per_epoch();
  meta.train_tokens = int64_t(train_data_->num_tokens());
  std::vector<StepRecord> records;
  for (const StepMetrics& m : history_)
    records.push_back({m.step, m.loss, m.lr, m.grad_norm, m.step_ms / 1e3, m.tokens_per_s, m.val_loss, m.skipped});
  write_hdf5_trace(cfg_.trace.file, *groups_->world, meta, tracer_, records);
}

// Did any rank get a stop signal? One int all-reduced per step (about 7 us on 2 ranks of one node):
// every rank leaves after the same step.
int Trainer::stop_signal() {
  const WaitContext context([this] { return "agreeing on stop signals after step " + std::to_string(step_); });
  return groups_->world->host_max(int32_t(StopSignals::pending()));
}

// The steps since the last checkpoint are saved: this is what the signal's grace is for.
void Trainer::save_on_stop(int signal, int64_t first) {
  const std::string& dir = cfg_.checkpoint.dir;
  if (!dir.empty() && step_ > first && step_ != saved_step_) save_checkpoint();
  end_message_ = std::string("stopped by ") + StopSignals::name(signal) + " after step " + std::to_string(step_) + ": " +
                 (dir.empty()         ? std::string("no checkpoint.dir, nothing saved")
                  : saved_step_ >= 0 ? "resume from " + dir + "/" + checkpoint_name(saved_step_, cfg_.checkpoint.format) +
                                           " with checkpoint.resume = \"auto\""
                                     : std::string("no step done, nothing to save"));
}

RunEnd Trainer::run() {
  const auto& t = cfg_.train;
  const bool root = rank_ == 0;
  if (root && !opts_.quiet) {
    std::printf("gpt2 train: %s | %d ranks (%s, %s, %s) | %s with %d threads, %d BLAS threads/rank\n",
                cfg_.model.describe().c_str(), topo_->world_size(), topo_->shape().describe().c_str(),
                cfg_.parallel.schedule.c_str(), groups_->backend.c_str(), env_.execution_space().c_str(),
                env_.host_threads(), blas_threads_);
    std::printf("params %.2fM | batch %lld x %d tokens | %d microbatch(es) of %d per rank | %lld batches/epoch\n",
                layout_->total() / 1e6, (long long)t.batch_size, cfg_.data.seq_len,
                cfg_.parallel.microbatches, mb_size_, (long long)train_loader_->batches_per_epoch());
    if (cfg_.train.precision != "fp32")
      std::printf("precision %s: 16-bit GEMMs on %s, fp32 master weights%s\n", cfg_.train.precision.c_str(),
                  gemm_lowp_backend(cfg_.train.precision == "bf16").c_str(),
                  loss_scale_.dynamic() ? ", dynamic loss scaling" : "");
    std::fflush(stdout);
  }
  double time_sum = 0, tok_sum = 0, rank_tok_sum = 0;
  int timed = 0;
  const int64_t first = step_;
  const int64_t end = opts_.stop_at > 0 ? std::min<int64_t>(opts_.stop_at, t.steps) : t.steps;
  RunEnd how = RunEnd::completed;
  int signal = stop_signal();  // (one that came during the set-up: no step at all)
  while (step_ < end) {
    if (signal != 0) {
      how = RunEnd::stopped;
      break;
    }
    StepMetrics m = train_step();
    signal = stop_signal();  // here the ranks are together (the step's sums were just all-reduced)
    poll_checkpoint();
    if (step_ > first + 1 || t.steps - first == 1) {  // the first step includes warm-up costs
      time_sum += m.step_ms / 1e3, tok_sum += m.tokens_per_s, rank_tok_sum += m.rank_tokens_per_s;
      ++timed;
    }
    // The loss and gradient norm are global (all-reduced): every rank sees the same values.
    const std::string bad = nonfinite_values(m.loss, m.grad_norm);
    if (!bad.empty() && !m.skipped) {
      how = RunEnd::diverged;
      end_message_ = "step " + std::to_string(m.step) + ": non-finite " + bad + ": the run diverged; stopped " +
                     "without saving this state (train.nonfinite = \"stop\"; \"skip\" skips such updates)";
    }
    const bool last = step_ == end;
    if (val_loader_ && how != RunEnd::diverged && ((t.eval_every > 0 && step_ % t.eval_every == 0) || last))
      m.val_loss = evaluate();
    // The trace's /metrics needs every step; without a trace only the last one is used (the final
    // loss), and keeping them all grew every rank's memory by 64 bytes a step without end.
    if (cfg_.trace.file.empty() && !history_.empty())
      history_.back() = m;
    else
      history_.push_back(m);
    if (root) {
      log_->step(m);
      if (m.val_loss >= 0) log_->eval(m.step, m.val_loss);
      if (!opts_.quiet && (step_ % t.log_every == 0 || last || step_ == first + 1 || !bad.empty())) {
        const double mean = timed ? time_sum / timed : m.step_ms / 1e3;
        std::printf("%s\n", progress_line(m, t.steps, mean * double(t.steps - step_)).c_str());
        if (m.val_loss >= 0) std::printf("step %d | val loss %.4f\n", m.step, m.val_loss);
      }
      if (m.skipped && loss_scale_.dynamic() && std::isfinite(m.loss))
        std::printf("step %d: gradient overflow at loss scale %g: update skipped, loss scale now %g\n", m.step,
                    m.loss_scale, loss_scale_.scale());
      else if (m.skipped)
        std::printf("step %d: non-finite %s: update skipped (train.nonfinite = \"skip\")\n", m.step, bad.c_str());
      std::fflush(stdout);
    }
    if (how == RunEnd::diverged) break;
    maybe_sample();
    maybe_bleu(m, last);
    const bool ckpt = !cfg_.checkpoint.dir.empty() &&
                      ((cfg_.checkpoint.every > 0 && step_ % cfg_.checkpoint.every == 0) || last);
    if (ckpt) {
      save_checkpoint();
      if (last) complete_checkpoint();  // (so that the trace holds its write)
      write_trace();
    }
  }
  if (how == RunEnd::stopped) save_on_stop(signal, first);
  complete_checkpoint();  // (checkpoint.async: the run ends when its last checkpoint is in place)
  if (how != RunEnd::completed || cfg_.checkpoint.dir.empty() || step_ == first) write_trace();
  print_summary(timed ? time_sum / timed : 0, timed ? tok_sum / timed : 0, timed ? rank_tok_sum / timed : 0);
  if (root && skipped_ > 0)
    std::printf("%lld update(s) skipped for non-finite values (%s)\n", (long long)skipped_,
                loss_scale_.dynamic() ? "fp16 gradient overflows under loss scaling, or train.nonfinite = \"skip\""
                                      : "train.nonfinite = \"skip\"");
  std::fflush(stdout);
  return how;
}

}  // namespace gpt2
