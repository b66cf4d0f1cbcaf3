#pragma once
// What a run tells its user: the banner, a progress line and a metrics-log line per step (rank 0),
// the BLEU evaluations, samples during training, the per-rank summary at the end and the trace file
// (trace.file: every rank's events, the step metrics, the run's /meta).
#include <memory>
#include <string>
#include <vector>

#include "tensor/device_counters.hpp"
#include "trace/hdf5_trace.hpp"
#include "train/evaluator.hpp"
#include "train/metrics.hpp"
#include "train/prediction.hpp"
#include "train/straggler.hpp"

namespace gpt2 {

struct TrainOptions {
  std::string metrics_jsonl;  // one JSON object per step (rank 0)
  bool quiet = false;         // no progress lines
  int stop_at = 0;            // > 0: stop after this step (checkpoint written), as if interrupted
};

class Reporter {
 public:
  Reporter(const RunConfig& cfg, const TrainOptions& opts, Environment& env, const RankValues& rank,
           const RankPasses& passes, TrainData& data, TrainState& state, ModelGather& gather, Tracer& tracer);
  ~Reporter();
  void open_log();        // rank 0: --metrics-jsonl, kept up to the step the run starts from
  void begin_run();       // rank 0 prints what runs; timing starts from the step now
  // After step m (bad: its non-finite values, "" when finite; last: the run's last step).
  void step(const StepMetrics& m, const std::string& bad, bool last);
  void bleu(const BleuReport& r);  // rank 0 logs and prints it
  void maybe_sample();             // collective: every train.sample_every steps, a sample from rank 0
  void summary();                  // collective: every rank's throughput and memory, printed by rank 0
  void write_trace(const StepCounts& counts);  // collective; trace.file
  const std::vector<StepMetrics>& history() const { return history_; }

 private:
  bool root() const { return rank_.root(); }
  void print_step(const StepMetrics& m, const std::string& bad, bool last);
  TraceMeta trace_meta(const StepCounts& counts) const;
  RunMeasurement measurement() const;  // this rank's, over the timed steps
  void compare_with_prediction(const std::vector<RunMeasurement>& ranks);  // rank 0

  const RunConfig& cfg_;
  const TrainOptions& opts_;
  Environment& env_;
  RankValues rank_;    // the rank's place, communicators, store and model
  RankPasses passes_;  // its executor (peak microbatches, activation memory)
  TrainData& data_;
  TrainState& state_;
  ModelGather& gather_;
  Tracer& tracer_;
  std::unique_ptr<MetricsLog> log_;  // rank 0
  std::vector<StepMetrics> history_;  // every step's with trace.file (the trace's /metrics), else the last
  RunPrediction prediction_;          // made at the start (begin_run)
  std::unique_ptr<StragglerMonitor> monitor_;
  struct Span {                       // the run: the step it started from, the updates it skipped
    int64_t first = 0, skipped = 0;
  } run_;
  struct Sums {                       // over the timed steps (not the warm-up)
    double step_s = 0, tok_s = 0, rank_tok_s = 0;
    int steps = 0;
    double mean(double Sums::*x) const { return steps ? this->*x / steps : 0; }
  } timed_;
};

}  // namespace gpt2
