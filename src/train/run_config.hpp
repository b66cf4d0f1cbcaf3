#pragma once
// Everything a run reads from its input deck. Defaults here are the documented defaults; the deck
// (inputs/*.toml) and `--set section.key=value` override them. `gpt2 info --config` prints the result.
#include <cstdint>
#include <string>
#include <vector>

#include "core/input_deck.hpp"
#include "formats/checkpoint_dir.hpp"
#include "model/activation_sizes.hpp"
#include "model/model_config.hpp"
#include "perf/layout.hpp"
#include "pipeline/pass_lists.hpp"
#include "runtime/topology.hpp"
#include "tensor/attention_choice.hpp"
#include "tensor/precision.hpp"
#include "train/nonfinite.hpp"

namespace gpt2 {

struct PassCosts;
struct ScheduleEntry;

struct DataConfig {
  std::string train;    // shard path or glob
  std::string val;      // shard path or glob; empty: no evaluation
  int seq_len = 64;     // T
  bool shuffle = false; // seeded permutation of the sequences per epoch
  std::string tokenizer = "auto";  // byte | gpt2 | auto (byte when vocab_size <= 256): for samples
  // Attention inside documents only, positions restarting at each (data/loader.hpp): in plain text a
  // document ends at eot_token; a translation shard's packed examples are documents whatever this says.
  bool document_mask = false;
  int eot_token = 50256;  // GPT-2's <|endoftext|>
};

// NumericsKeys (perf/layout.hpp): precision, recompute, recompute_every, loss_chunk_rows, ns_steps,
// ns_dtype.
struct TrainConfig : NumericsKeys {
  int64_t batch_size = 8;  // GLOBAL sequences per optimizer step
  int steps = 20;
  double lr = 3e-4;
  double min_lr = 0;       // floor of the cosine / noam schedules
  int warmup_steps = 0;
  std::string optimizer = "adamw";    // a registered optimizer (modules/optim)
  std::string schedule = "constant";  // a registered learning-rate schedule: constant | cosine | noam
  double weight_decay = 0.1;          // tensors of rank >= 2 only
  double grad_clip = 1.0;             // max global grad norm; <= 0 disables
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  // train.optimizer = "muon" (modules/optim/muon): the blocks' matrices' peak rate and momentum.
  double muon_lr = 0.02, muon_momentum = 0.95;
  int64_t seed = 1337;
  int eval_every = 0;    // steps between validation passes (0: only at the end if data.val is set)
  int eval_batches = 4;  // validation batches per pass
  int sample_every = 0;  // steps between printed samples (0: none)
  int sample_tokens = 64;
  // Translation (README, Translation): corpus BLEU of greedy translations of a held-out pairs file,
  // logged after each epoch (or every bleu_every steps) with the epoch's time and tokens/s.
  std::string bleu_pairs;  // source<TAB>target lines (`gpt2 prepare --pairs` writes DIR/val.tsv); "": none
  int bleu_every = 0;      // steps between BLEU evaluations (0: after each epoch and at the end)
  int bleu_examples = 0;   // pairs translated each time (0: all)
  int bleu_tokens = 64;    // most tokens of a translation (the end token stops it sooner)
  int log_every = 1;     // steps between progress lines
  // TF32 tensor cores (CUDA) for the matrix products left in fp32: auto -- under bf16 / fp16
  // (attention's products; PyTorch's autocast runs them in bf16), not in fp32 runs --, true, false.
  Choice<Toggle> tf32 = Toggle::automatic;
  bool tf32_on() const { return tf32 == Toggle::on || (tf32 == Toggle::automatic && precision != Precision::fp32); }
  // A step whose loss or gradient norm is not finite: "stop" the run (no checkpoint from that
  // state) or "skip" its update (the step still counts: data position and lr schedule move on).
  Choice<NonFinitePolicy> nonfinite = NonFinitePolicy::stop;
  double initial_loss_scale = 65536;  // fp16: the dynamic loss scale's start
  int loss_scale_window = 1000;       // fp16: clean steps in a row before the scale doubles
  // The run's predicted step (train/prediction.hpp): the hardware file it is priced on ("": the one
  // of the device the run has), and how far off the measurement may be before a line says which
  // part is (0: never).
  std::string hardware;
  double predict_warn = 0.25;
  // Slow ranks named as the run goes (train/straggler.hpp): every straggler_every steps (0: never;
  // no cost then) the ranks compare their compute, and a rank this many times its peers' median
  // is named. A rank whose peak memory passes memory_warn of memory_limit_mb (0: its device's, or
  // its share of the node's) is named too.
  int straggler_every = 50;
  double straggler_ratio = 1.2;
  double memory_warn = 0.9;
  double memory_limit_mb = 0;
};

// GridKeys (perf/layout.hpp): dp, pp, tp, cp, zero, sequence_parallel, microbatches, schedule,
// virtual_stages, stage_layers, bucket_mb, grad_reduce_dtype, param_gather_dtype.
struct ParallelConfig : GridKeys {
  std::string schedule_file;      // a hand-written schedule; when set, its name becomes `schedule`
  std::string comm = "auto";      // auto | mpi | nccl
  int host_threads = 0;           // Kokkos host threads per rank; 0: cores on the node / ranks on it
  int blas_threads = 0;           // host BLAS threads per rank; 0: cores on the node / ranks on it
};

struct CheckpointConfig {
  std::string init_from;  // our checkpoint or an llm.c model file to start from
  std::string dir;        // where checkpoints go; empty: none written
  int every = 0;          // steps between checkpoints (0: only at the end when dir is set)
  int keep = 0;           // newest checkpoints kept in dir (0: all)
  // true: continue from the newest checkpoint in dir that verifies (it must have one); "auto": the
  // same when dir holds a checkpoint, else start fresh; false: start fresh.
  Choice<Toggle> resume = Toggle::off;
  // h5: one HDF5 file that every rank writes its own part of (formats/checkpoint_h5); bin: one file in
  // our binary format, assembled on rank 0. Either resumes on any layout.
  Choice<CheckpointFormat> format = CheckpointFormat::h5;
  // h5: each rank copies its state to host memory (one copy) and a background thread writes it while
  // training goes on; the next checkpoint, a stop and the end of the run wait for it.
  bool async = false;
};

struct TraceConfig {
  std::string file;       // HDF5 trace path; empty: no trace
  bool sync = false;      // fence device work around traced events (CUDA)
  bool units = false;     // also time each model unit inside forwards and backwards
  int64_t max_events = 1 << 20;  // per rank; events beyond are counted, not stored
};

struct RunConfig {
  ModelConfig model;
  // model.attention: auto | fused (no T x T matrix: tensor/flash_attention.hpp) | materialized
  // (the probabilities kept for the backward). A choice of kernels, not of shape; with context
  // parallelism the ring is fused whatever this says. auto: fused where it was measured faster
  // (tensor/attention_choice.hpp).
  Choice<AttentionKernels> attention = AttentionKernels::automatic;
  bool fused_attention() const;  // what model.attention resolves to for this run
  // Whether attention keeps to documents: data.document_mask, or data.train's shards carry loss
  // masks (packed translation examples).
  bool document_masks() const;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  TraceConfig trace;

  std::vector<DeckField> fields();  // the schema: every key, bound to the members above
  // Loads a deck and applies overrides; InputError on any bad key or value.
  static RunConfig load(const std::string& path, const std::vector<std::string>& overrides = {});
  static RunConfig from_deck(const InputDeck& deck);  // a deck already read (and overridden)
  GridShape grid() const { return {parallel.dp, parallel.pp, parallel.cp, parallel.tp}; }
  // The block's relative pass costs from the model's shape, which time-ordered schedules (zb-v) order
  // by: the same on every rank.
  PassCosts pass_costs() const;
  // The pipeline the deck asks for: schedule, ranks, microbatches, virtual stages, pass costs.
  PipelineShape pipeline_shape() const;
  // The model and batch, and the parallel layout, as the performance model and the layout rules
  // (perf/layout_check) take them.
  Workload workload() const;
  Layout layout() const;
  // Checks values and their combinations (the layout's through the one rule set the planner uses);
  // world_size > 0 also checks dp * pp * tp against it.
  void validate(int world_size = 0) const;
  std::string toml() const;  // the effective configuration
  // Sequences per microbatch on one rank: its dp share of the batch over the microbatches.
  int microbatch_size() const { return int(train.batch_size / parallel.dp / parallel.microbatches); }
};

}  // namespace gpt2
