#pragma once
// The training run: the loop and the step, over parts with one job each --
//   RankEngine    (rank_engine.hpp)   this rank's grid place, communicators, model chunks, pipeline
//   TrainData     (train_data.hpp)    the token data and each rank's microbatches
//   LossSums      (loss_sums.hpp)     the step's loss and gradient norm, reduced over the grid
//   Checkpointer  (checkpointer.hpp)  what the run starts from and the checkpoints it writes
//   Evaluator     (evaluator.hpp)     validation loss and BLEU
//   Reporter      (reporter.hpp)      progress, samples, the summary, the trace file
// One step: zero grads -> pipeline actions (forwards/backwards, activations between stages; each
// unit's gradient reduced over dp -- all-reduce, or reduce-scatter into the rank's shard -- as
// backward completes it) -> tied-embedding sum between first and last stage -> global loss and
// grad norm -> clip + optimizer (on the shard, then the parameters gathered under ZeRO-1/2).
// Every group of one rank has a serial communicator: with one rank every communication step is a
// no-op and this is the one-rank trainer.
#include <memory>
#include <string>
#include <vector>

#include "plugins/lr_schedule.hpp"
#include "tensor/device_counters.hpp"
#include "train/checkpointer.hpp"
#include "train/evaluator.hpp"
#include "train/reporter.hpp"

namespace gpt2 {

// How run() ended; `gpt2 train` exits 0, 4 or 5 for them (README, Reliability).
enum class RunEnd {
  completed,  // every step (or up to --stop-at) done
  stopped,    // a stop signal (SIGTERM, SIGINT, SIGUSR1): the step in flight finished and was saved
  diverged,   // a non-finite loss or gradient norm with train.nonfinite = "stop": nothing saved
};

class Trainer {
 public:
  // Everything that can fail on bad input happens here, agreed on by all ranks (CollectiveError).
  // comm: the ranks of this run (the world; tests run several runs side by side on sub-groups).
  Trainer(RunConfig cfg, Environment& env, TrainOptions opts = {}, MPI_Comm comm = MPI_COMM_WORLD);
  ~Trainer();

  // The remaining steps, evaluations, samples, checkpoints, trace. Between steps the ranks agree on
  // whether to go on (a stop signal on any rank, see runtime/stop_signals.hpp); end_message() says
  // why a run that did not complete ended.
  RunEnd run();
  const std::string& end_message() const { return end_message_; }
  StepMetrics train_step();  // one optimizer step
  double evaluate() { return evaluator_->validation_loss(); }  // mean over train.eval_batches batches
  void save_checkpoint() { checkpointer_->save(); }            // collective; into checkpoint.dir
  double bleu() { return evaluator_->bleu(); }                 // collective; rank 0's (Evaluator)
  void write_trace() { reporter_->write_trace(counts_); }      // collective; trace.file

  int64_t step() const { return state_.step; }
  // Every step's metrics when trace.file is set (the trace's /metrics); otherwise only the last.
  const std::vector<StepMetrics>& history() const { return reporter_->history(); }
  const Topology& topology() const { return engine_->topo(); }
  Stage<float>& stage() { return *engine_->values().chunks.front(); }  // the first chunk's
  const StageLayout& stage_layout() const { return engine_->values().local(); }  // the rank's
  const RunConfig& config() const { return cfg_; }
  const Tracer& tracer() const { return tracer_; }
  const LossScale& loss_scale() const { return state_.loss_scale; }
  const PipelineExecutor& executor() const { return engine_->passes().exec; }
  ParamStore& store() { return engine_->store(); }
  const CommGroups& groups() const { return engine_->groups(); }
  // Parameters of the whole model in the global layout, assembled on world rank 0 (collective;
  // other ranks get an empty vector). With pp > 1 only dp replica 0 contributes.
  std::vector<float> gather_params() { return gather_->params(); }
  // This rank's parameters in its local layout (collective over dp under ZeRO-3).
  std::vector<float> local_params() { return engine_->store().local_values("params"); }
  // This rank's memory at rest, and its saved activations at their peak (slots x slot size).
  MemoryUse memory() const { return engine_->store().memory(); }
  size_t activation_bytes() const { return engine_->passes().activation_bytes(); }
  // The most of each count any training step (the first included) made on this rank: whole-device
  // waits, the host's other waits, allocations, frees, launches (tensor/device_counters).
  const DeviceCounters& step_counts() const { return counts_.maxima(); }
  // What the first step that allocated or waited beyond its one whole-device wait did (empty: none).
  const std::vector<std::string>& step_events() const { return counts_.events(); }

 private:
  // The update from the step's sums: skipped (non-finite, an fp16 overflow) or clipped and applied.
  void update(StepMetrics& m, int64_t counted_tokens);
  int stop_signal();                             // collective: a stop signal on any rank, or 0
  void warn_device_events() const;               // what a step should not have done, if any did
  void save_on_stop(int signal, int64_t first);  // checkpoint and end_message_ of a stopped run
  void after_step(StepMetrics& m, bool last);    // evaluation, reports, samples, BLEU, checkpoints

  RunConfig cfg_;
  TrainOptions opts_;
  Tracer tracer_;
  TrainState state_;
  LrSchedule lr_;
  StepCounts counts_;
  std::unique_ptr<TrainData> data_;
  std::unique_ptr<RankEngine> engine_;
  std::unique_ptr<LossSums> sums_;
  std::unique_ptr<ModelGather> gather_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<Reporter> reporter_;
  std::string end_message_;
};

}  // namespace gpt2
