#pragma once
// The training run: composes the engine (Stage, data, trace, pipeline executor, parameter store)
// with the strategies the deck picks through the registries (schedule, communicator backend,
// optimizer, learning-rate schedule, ZeRO level). One step:
//   zero grads -> pipeline actions (forwards/backwards, activations between stages; each unit's
//   gradient reduced over dp -- all-reduce, or reduce-scatter into the rank's shard -- as backward
//   completes it) -> tied-embedding sum between first and last stage -> global loss and grad
//   norm -> clip + optimizer (on the shard, then the parameters gathered under ZeRO-1/2).
// Every group of one rank has a serial communicator: with dp = pp = 1 every communication step is a
// no-op and this is the one-rank trainer. Its parts: trainer.cpp (set-up, the step, evaluation),
// trainer_checkpoint.cpp (initial state, checkpoints), trainer_run.cpp (the run loop, the trace),
// trainer_report.cpp (samples, the summary).
#include <memory>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "data/loader.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_dir.hpp"
#include "parallel/checkpoint_writer.hpp"
#include "model/stage.hpp"
#include "parallel/param_store.hpp"
#include "parallel/step_sums.hpp"
#include "pipeline/executor.hpp"
#include "parallel/cp_comm.hpp"
#include "parallel/tp_comm.hpp"
#include "runtime/comm_groups.hpp"
#include "runtime/device_counters.hpp"
#include "runtime/environment.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/topology.hpp"
#include "train/loss_scale.hpp"
#include "train/metrics.hpp"
#include "train/run_config.hpp"
#include "train/translation.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

// How run() ended; `gpt2 train` exits 0, 4 or 5 for them (README, Reliability).
enum class RunEnd {
  completed,  // every step (or up to --stop-at) done
  stopped,    // a stop signal (SIGTERM, SIGINT, SIGUSR1): the step in flight finished and was saved
  diverged,   // a non-finite loss or gradient norm with train.nonfinite = "stop": nothing saved
};

struct TrainOptions {
  std::string metrics_jsonl;  // one JSON object per step (rank 0)
  bool quiet = false;         // no progress lines
  int stop_at = 0;            // > 0: stop after this step (checkpoint written), as if interrupted
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
  double evaluate();         // mean validation loss over train.eval_batches batches
  void save_checkpoint();    // collective; into checkpoint.dir
  // Corpus BLEU (0-100, sacreBLEU's) of greedy translations of train.bleu_pairs' sources, on rank 0
  // (-1 on the others, and without pairs). Collective: a model spread over ranks is gathered.
  double bleu();
  void write_trace();        // collective; trace.file

  int64_t step() const { return step_; }
  // Every step's metrics when trace.file is set (the trace's /metrics); otherwise only the last.
  const std::vector<StepMetrics>& history() const { return history_; }
  const Topology& topology() const { return *topo_; }
  Stage<float>& stage() { return *stages_.front(); }  // the first chunk's
  const StageLayout& stage_layout() const { return stages_.front()->layout(); }  // the rank's
  const RunConfig& config() const { return cfg_; }
  const Tracer& tracer() const { return tracer_; }
  const LossScale& loss_scale() const { return loss_scale_; }
  const PipelineExecutor& executor() const { return *exec_; }
  ParamStore& store() { return *store_; }
  const CommGroups& groups() const { return *groups_; }
  // Parameters of the whole model in the global layout, assembled on world rank 0 (collective;
  // other ranks get an empty vector). With pp > 1 only dp replica 0 contributes.
  std::vector<float> gather_params();
  // This rank's parameters in its local layout (collective over dp under ZeRO-3).
  std::vector<float> local_params() { return store_->local_values("params"); }
  // This rank's memory at rest, and its saved activations at their peak (slots x slot size).
  MemoryUse memory() const { return store_->memory(); }
  size_t param_bytes() const { return store_->memory().params; }
  // The most microbatches' saved activations held at once, plus what recomputed blocks share.
  size_t activation_bytes() const {
    size_t shared = 0;
    for (const auto& s : stages_) shared += s->recompute_bytes();
    return size_t(exec_->peak_slots()) * exec_->slot_bytes() + shared;
  }
  // The most of each count one steady-state training step (from the second on) made on this rank:
  // whole-device waits, host waits for communication, allocations, frees (runtime/device_counters).
  const DeviceCounters& steady_step_counts() const { return step_counts_; }
  // The labels of the latest allocations of the first steady-state step that allocated (empty: none).
  const std::vector<std::string>& steady_step_allocations() const { return step_allocations_; }

 private:
  void setup_data();
  void record_steady_counts(const DeviceCounters& step);  // the most of each, kept
  void setup_model();
  void prepare_outputs();  // collective: every file and folder the run writes checked, made, locked
  void load_initial_state();
  std::string pick_resume_checkpoint();  // rank 0; "" to start fresh
  void load_microbatch(DataLoader& loader, int64_t batch, int mb, Activations<float>& a);
  // The step's loss and gradient norm stay in device memory until the step's work is all queued:
  // reduce_step_sums queues the local sums and their all-reduces (later kernels, the optimizer's
  // clipping among them, see the global values); read_step_sums waits for them on the host.
  void reduce_step_sums(int microbatches_run, bool with_grad_norm);
  struct StepValues {
    double loss = 0, grad_norm = 0;  // mean token loss over the global batch; global gradient L2 norm
  };
  StepValues read_step_sums(int64_t counted_tokens);  // the loss: the sum over the counted targets
  std::vector<float> gather_section(const std::string& section);  // the global layout -> rank 0
  // checkpoint.format: bin (assembled on rank 0) or h5 (every rank writes its part).
  void save_bin_checkpoint(const std::string& path, const CheckpointMeta& meta, const std::vector<std::string>& sections);
  void publish(const std::string& path, int64_t step, const H5CheckpointWriter* h5 = nullptr);  // rank 0: `latest`, the message, checkpoint.keep
  void poll_checkpoint();      // collective, after each step: finishes a background write that has ended
  void complete_checkpoint();  // collective: waits for the background write in flight and finishes it
  void read_checkpoint(const std::string& path, const std::string& key, bool with_optimizer);
  void maybe_sample();
  void setup_bleu();                                // reads train.bleu_pairs (every rank: errors agree)
  void maybe_bleu(const StepMetrics& m, bool last);  // collective; after each step
  Stage<float>* root_whole_model();                 // collective: rank 0's copy of the whole model
  int stop_signal();                             // collective: a stop signal on any rank, or 0
  void save_on_stop(int signal, int64_t first);  // checkpoint and end_message_ of a stopped run
  void print_summary(double step_s, double tok_s, double rank_tok_s);
  StageLayout layout_of(const GridCoords& c) const;  // the local layout of the rank at c

  RunConfig cfg_;
  Environment& env_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  TrainOptions opts_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<CommGroups> groups_;
  std::unique_ptr<ParamLayout> layout_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<CommTpGroup> tp_group_;
  std::unique_ptr<CommCpRing> cp_ring_;
  std::vector<std::unique_ptr<Stage<float>>> stages_;  // one per chunk this rank runs
  Placement placement_;
  std::unique_ptr<Stage<float>> sample_stage_;  // rank 0, when the model is spread out: a whole copy
  std::unique_ptr<TokenDataset> train_data_, val_data_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<PipelineExecutor> exec_;
  std::unique_ptr<MetricsLog> log_;
  Tracer tracer_;
  LrSchedule lr_;
  std::vector<Action> train_actions_, eval_actions_;
  Buffer<float> losses_;
  std::unique_ptr<StepSums> step_sums_;  // the loss sum and squared gradients, reduced over the grid
  std::vector<int> host_inputs_, host_targets_;
  std::vector<int> stage_layers_;
  int mb_size_ = 1;  // sequences per microbatch on this rank
  int64_t step_ = 0;
  Rng sample_rng_;
  std::vector<StepMetrics> history_;
  int blas_threads_ = 1;
  std::unique_ptr<CheckpointDirLock> dir_lock_;  // rank 0, while checkpoint.dir is set
  int64_t saved_step_ = -1;                      // step of the last checkpoint written or loaded
  std::unique_ptr<BackgroundCheckpoint> in_flight_;  // checkpoint.async: the write under way
  std::vector<ParamStore::Owned> staging_;           // and the copy it writes, kept for the next
  int64_t skipped_ = 0;                          // updates skipped (non-finite, or fp16 overflows)
  DeviceCounters step_counts_;                   // the most of each count a steady-state step made
  int64_t steps_run_ = 0;                        // training steps this process ran
  std::vector<std::string> step_allocations_;    // what the first steady step that allocated made
  LossScale loss_scale_;                         // fp16's dynamic loss scale (1 otherwise)
  std::vector<Pair> bleu_pairs_;                 // train.bleu_pairs (the first bleu_examples)
  std::unique_ptr<Tokenizer> bleu_tok_;
  PairTokens bleu_pt_;
  double bleu_train_s_ = 0, bleu_tokens_ = 0;    // the steps' time and tokens since the last BLEU
  double created_ = 0;                           // steady clock (s) when the BLEU set-up ran
  std::string end_message_;
};

}  // namespace gpt2
