#include "train/reporter.hpp"

#include <cmath>
#include <cstdio>

#include "core/json.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule_lists.hpp"
#include "runtime/process_memory.hpp"
#include "tensor/gemm_lowp.hpp"
#include "train/sampler.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

Reporter::Reporter(const RunConfig& cfg, const TrainOptions& opts, Environment& env, const RankValues& rank,
                   const RankPasses& passes, TrainData& data, TrainState& state, ModelGather& gather, Tracer& tracer)
    : cfg_(cfg), opts_(opts), env_(env), rank_(rank), passes_(passes), data_(data), state_(state), gather_(gather),
      tracer_(tracer), monitor_(std::make_unique<StragglerMonitor>(cfg, env, rank.topo, *rank.groups.world, tracer)) {}

Reporter::~Reporter() = default;

void Reporter::open_log() {
  if (root()) log_ = std::make_unique<MetricsLog>(opts_.metrics_jsonl, state_.step);
}

void Reporter::begin_run() {
  run_.first = state_.step;
  timed_ = Sums();
  prediction_ = predict_run(cfg_, env_.device());  // (every rank: its memory goes in its trace)
  if (!root()) return;
  const RunPrediction& p = prediction_;
  if (log_) {
    Json j;
    j.begin_object().key("predicted").begin_object().key("source").value(p.source).key("problem").value(p.problem);
    j.key("step_ms").value(p.step_s * 1e3).key("tokens_per_s").value(p.tokens_per_s);
    j.key("memory_bytes").values(p.memory_bytes).end().end();
    log_->line(j.str());
  }
  if (opts_.quiet) return;
  const Topology& topo = rank_.topo;
  std::printf("gpt2 train: %s | %d ranks (%s, %s, %s) | %s with %d threads, %d BLAS threads/rank\n",
              cfg_.model.describe().c_str(), topo.world_size(), topo.shape().describe().c_str(),
              cfg_.parallel.schedule.c_str(), rank_.groups.backend.c_str(), env_.execution_space().c_str(),
              env_.host_threads(), env_.blas_threads());
  const std::string fit = env_.thread_fit(env_.blas_threads());
  if (!fit.empty()) std::printf("gpt2 train: %s\n", fit.c_str());
  std::printf("params %.2fM | batch %lld x %d tokens | %d microbatch(es) of %d per rank | %lld batches/epoch\n",
              rank_.plan.model->total() / 1e6, (long long)cfg_.train.batch_size, cfg_.data.seq_len,
              cfg_.parallel.microbatches, passes_.microbatch_size, (long long)data_.train().batches_per_epoch());
  if (cfg_.train.precision != Precision::fp32)
    std::printf("precision %s: 16-bit GEMMs on %s, fp32 master weights%s\n", word(cfg_.train.precision),
                gemm_lowp_backend(cfg_.train.precision == Precision::bf16).c_str(),
                state_.loss_scale.dynamic() ? ", dynamic loss scaling" : "");
  std::printf("gpt2 train: %s\n", prediction_line(p).c_str());
  std::fflush(stdout);
}

RunMeasurement Reporter::measurement() const {
  RunMeasurement m;
  m.step_s = timed_.mean(&Sums::step_s), m.tokens_per_s = timed_.mean(&Sums::tok_s);
  m.memory_bytes = double(peak_kokkos_bytes()), m.rss_bytes = double(peak_rss_bytes());
  if (!tracer_.enabled() || timed_.steps == 0) return m;
  const bool all = cfg_.train.steps - run_.first == 1;  // (as step(): a one-step run times its only step)
  double compute = 0, comm = 0;
  for (const Event& e : tracer_.events()) {
    if (!all && e.step <= run_.first + 1) continue;
    const auto k = EventKind(e.kind);
    if (k == EventKind::forward || k == EventKind::backward || k == EventKind::backward_weight)
      compute += e.end - e.start;
    else if (event_class(k) == EventClass::communication)
      comm += e.end - e.start;
  }
  m.compute_s = compute / timed_.steps, m.comm_s = comm / timed_.steps;
  return m;
}

void Reporter::compare_with_prediction(const std::vector<RunMeasurement>& ranks) {
  if (log_ && !ranks.empty()) {
    Json j;
    j.begin_object().key("measured").begin_object().key("step_ms").value(ranks[0].step_s * 1e3);
    j.key("tokens_per_s").value(ranks[0].tokens_per_s).key("memory_bytes").begin_array();
    for (const RunMeasurement& m : ranks) j.value(m.memory_bytes);
    j.end().key("rss_bytes").begin_array();
    for (const RunMeasurement& m : ranks) j.value(m.rss_bytes);
    j.end().end().end();
    log_->line(j.str());
  }
  if (opts_.quiet) return;
  for (const std::string& line : comparison_lines(prediction_, ranks, cfg_.train.predict_warn))
    std::printf("gpt2 train: %s\n", line.c_str());
}

void Reporter::step(const StepMetrics& m, const std::string& bad, bool last) {
  const bool timed = state_.step > run_.first + 1 || cfg_.train.steps - run_.first == 1;  // the first step includes warm-up costs
  if (timed) {
    timed_.step_s += m.step_ms / 1e3, timed_.tok_s += m.tokens_per_s, timed_.rank_tok_s += m.rank_tokens_per_s;
    ++timed_.steps;
  }
  run_.skipped += m.skipped;
  // The trace's /metrics needs every step; without a trace only the last one is used (the final
  // loss), and keeping them all grew every rank's memory by 64 bytes a step without end.
  if (cfg_.trace.file.empty() && !history_.empty())
    history_.back() = m;
  else
    history_.push_back(m);
  if (root()) print_step(m, bad, last);
  monitor_->after_step(m, timed, log_.get(), opts_.quiet);
}

void Reporter::print_step(const StepMetrics& m, const std::string& bad, bool last) {
  const auto& t = cfg_.train;
  const int64_t step = state_.step;
  log_->step(m);
  if (m.val_loss >= 0) log_->eval(m.step, m.val_loss);
  if (!opts_.quiet && (step % t.log_every == 0 || last || step == run_.first + 1 || !bad.empty())) {
    const double mean = timed_.steps ? timed_.mean(&Sums::step_s) : m.step_ms / 1e3;
    std::printf("%s\n", progress_line(m, t.steps, mean * double(t.steps - step)).c_str());
    if (m.val_loss >= 0) std::printf("step %d | val loss %.4f\n", m.step, m.val_loss);
  }
  if (m.skipped && state_.loss_scale.dynamic() && std::isfinite(m.loss))
    std::printf("step %d: gradient overflow at loss scale %g: update skipped, loss scale now %g\n", m.step,
                m.loss_scale, state_.loss_scale.scale());
  else if (m.skipped)
    std::printf("step %d: non-finite %s: update skipped (train.nonfinite = \"skip\")\n", m.step, bad.c_str());
  std::fflush(stdout);
}

void Reporter::bleu(const BleuReport& r) {
  if (!root()) return;
  if (log_) log_->bleu(int(state_.step), r.epoch, r.score, r.train_s, r.tokens_per_s, r.elapsed_s);
  if (opts_.quiet) return;
  std::printf("epoch %.4g | step %lld | BLEU %.2f | training %.2f s, %.0f tok/s since the last | %zu pairs "
              "translated in %.2f s | elapsed %s\n",
              r.epoch, (long long)state_.step, r.score, r.train_s, r.tokens_per_s, r.pairs, r.seconds,
              format_duration(r.elapsed_s).c_str());
  std::fflush(stdout);
}

void Reporter::maybe_sample() {
  const int every = cfg_.train.sample_every;
  const int64_t step = state_.step;
  if (every <= 0 || step % every != 0) return;
  const WaitContext context([step] { return "sampling after step " + std::to_string(step); });
  if (rank_.topo.pp() > 1) {
    static bool told = false;
    if (root() && !told) std::printf("(samples during training need parallel.pp = 1; use gpt2 sample)\n");
    told = true;
    return;
  }
  Stage<float>* stage = gather_.sampling_model();
  if (!root()) return;
  std::unique_ptr<Tokenizer> tok = make_sample_tokenizer(cfg_.data.tokenizer, cfg_.model.vocab_size);
  const std::vector<int> prompt = {tok->eot() >= 0 ? tok->eot() : int('\n')};
  SampleOptions so;
  so.tokens = cfg_.train.sample_tokens;
  const std::vector<int> out = generate(*stage, prompt, so, state_.sample_rng);
  std::printf("--- sample at step %lld ---\n%s\n---\n", (long long)step, tok->decode(out).c_str());
  std::fflush(stdout);
}

void Reporter::summary() {
  struct RankStats {
    double step_s, tok_s, param_mib, grad_mib, opt_mib, act_mib, peak_mb, compute_ms, wait_ms, used_mib;
  };
  const double step_s = timed_.mean(&Sums::step_s), tok_s = timed_.mean(&Sums::tok_s);
  const MemoryUse mem = rank_.store.memory();
  const RankStats mine{step_s, timed_.mean(&Sums::rank_tok_s), mem.params / 1048576.0, mem.grads / 1048576.0,
                       mem.optimizer / 1048576.0, passes_.activation_bytes() / 1048576.0,
                       double(passes_.exec.peak_slots()), monitor_->compute_s() * 1e3, monitor_->wait_s() * 1e3,
                       StragglerMonitor::used_memory_bytes() / 1048576.0};
  const std::vector<RankStats> all = rank_.groups.world->host_gather_all(mine);
  const std::vector<RunMeasurement> measured = rank_.groups.world->host_gather_all(measurement());
  if (!root()) return;
  compare_with_prediction(measured);
  const Topology& topo = rank_.topo;
  const int64_t per_epoch = data_.train().batches_per_epoch();
  if (!opts_.quiet && step_s > 0) {
    std::printf("done: %lld steps | mean step %.1f ms | %.0f tok/s in all (sum over dp ranks) | time per epoch %s\n",
                (long long)state_.step, step_s * 1e3, tok_s, format_duration(step_s * per_epoch).c_str());
    const int size = topo.world_size();
    for (int r = 0; r < size && r < 16; ++r) {
      const RankStats& s = all[size_t(r)];
      const GridCoords c = Topology::coords_of(topo.shape(), r);
      std::printf("  rank %d (dp %d, stage %d%s): %.0f tok/s on its data, time per epoch %s | params %.1f MiB | "
                  "grads %.1f MiB | optimizer %.1f MiB | peak activations %.1f MiB (%.0f microbatches)\n",
                  r, c.dp, c.pp,
                  ((topo.cp() > 1 ? ", cp " + std::to_string(c.cp) : std::string()) +
                   (topo.tp() > 1 ? ", tp " + std::to_string(c.tp) : std::string())).c_str(), s.tok_s,
                  format_duration(s.step_s * per_epoch).c_str(), s.param_mib, s.grad_mib, s.opt_mib, s.act_mib,
                  s.peak_mb);
      if (s.compute_ms > 0)
        std::printf("    compute %.1f ms, waits %.1f ms a step | peak memory %.1f MiB (%s)\n", s.compute_ms, s.wait_ms,
                    s.used_mib, StragglerMonitor::used_memory_kind());
    }
    if (size > 16) std::printf("  (%d more ranks)\n", size - 16);
    if (!history_.empty()) std::printf("final loss %.4f\n", history_.back().loss);
  }
  if (run_.skipped > 0)
    std::printf("%lld update(s) skipped for non-finite values (%s)\n", (long long)run_.skipped,
                state_.loss_scale.dynamic() ? "fp16 gradient overflows under loss scaling, or train.nonfinite = \"skip\""
                                            : "train.nonfinite = \"skip\"");
  std::fflush(stdout);
}

void Reporter::write_trace(const StepCounts& counts) {
  if (cfg_.trace.file.empty()) return;
  std::vector<StepRecord> records;
  for (const StepMetrics& m : history_)
    records.push_back({m.step, m.loss, m.lr, m.grad_norm, m.step_ms / 1e3, m.tokens_per_s, m.val_loss, m.skipped});
  write_hdf5_trace(cfg_.trace.file, *rank_.groups.world, trace_meta(counts), tracer_, records);
}

TraceMeta Reporter::trace_meta(const StepCounts& counts) const {
  const Topology& topo = rank_.topo;
  TraceMeta meta;
  meta.config_toml = cfg_.toml();
  meta.world_size = topo.world_size();
  meta.grid = topo.shape();
  meta.coords = topo.coords();
  meta.host = env_.host(), meta.local_rank = env_.local_rank();
  meta.microbatches = cfg_.parallel.microbatches;
  meta.schedule = cfg_.parallel.schedule;
  meta.recompute = word(cfg_.train.recompute), meta.recompute_every = cfg_.train.recompute_every;
  meta.attention = cfg_.fused_attention() ? "fused" : "materialized";
  meta.virtual_stages = rank_.plan.placement.chunks;
  meta.placement = rank_.plan.placement.kind == Placement::Kind::vee ? "vee" : "loop";
  // Equal stages, each pass costing what the model's shape says (forward 1, B and W adding up to 2):
  // the schedule's own bubble, as the trainer ordered it.
  const PassCosts pc = cfg_.pass_costs();
  meta.bubble_theory = simulate_schedule(cfg_.parallel.schedule, topo.pp(), cfg_.parallel.microbatches,
                                         cfg_.parallel.virtual_stages, sim_costs(pc), pc)
                           .bubble_fraction;
  meta.execution_space = env_.execution_space();
  meta.device = env_.device();
  meta.comm = rank_.groups.backend;
  meta.blas_threads = env_.blas_threads();
  meta.host_threads = env_.host_threads();
  meta.stage_layers = rank_.plan.stage_layers;
  meta.tokens_per_step = cfg_.train.batch_size * cfg_.data.seq_len;
  meta.num_params = int64_t(rank_.plan.model->total());
  meta.model = cfg_.model;
  meta.seq_len = cfg_.data.seq_len;
  meta.batch_size = cfg_.train.batch_size;
  const ParamStore& store = rank_.store;
  const MemoryUse mem = store.memory();
  meta.param_bytes = double(mem.params), meta.grad_bytes = double(mem.grads), meta.optimizer_bytes = double(mem.optimizer);
  meta.workspace_bytes = double(store.peak_workspace_bytes());
  meta.zero = cfg_.parallel.zero;
  meta.stage_param_bytes = double(rank_.local().local_size() * sizeof(float));
  meta.param_gather_bytes = double(store.gather_bytes());
  meta.activation_bytes = double(passes_.activation_bytes());
  meta.peak_microbatches = double(passes_.exec.peak_slots());
  meta.fences_reported = device_fences_reported() ? 1 : 0;
  const RunPrediction& p = prediction_;
  meta.prediction_source = p.source;
  meta.predicted_step_ms = p.step_s * 1e3, meta.predicted_tokens_per_s = p.tokens_per_s;
  const size_t me = size_t(rank_.groups.world->rank());
  meta.predicted_memory_bytes = me < p.memory_bytes.size() ? p.memory_bytes[me] : 0;
  meta.measured_memory_bytes = double(peak_kokkos_bytes()), meta.measured_rss_bytes = double(peak_rss_bytes());
  if (device_counters_installed()) {
    const DeviceCounters& c = counts.maxima();
    meta.device_waits_per_step = double(c.device_waits);
    meta.allocations_per_step = double(c.allocations + c.frees);
    meta.host_waits_per_step = double(c.host_waits);
    meta.stream_waits_per_step = double(c.stream_waits);
    meta.host_copies_per_step = double(c.host_copies);
    meta.launches_per_step = double(c.launches);
    meta.bytes_moved_per_step = double(c.bytes_moved);
  }
  meta.event_timing = cfg_.trace.sync ? "fenced per event" : cfg_.trace.units ? "fenced per unit" : "host issue times";
  meta.steps = cfg_.train.steps;
  meta.batches_per_epoch = data_.train().batches_per_epoch();
  meta.train_tokens = data_.train_tokens();
  return meta;
}

}  // namespace gpt2
