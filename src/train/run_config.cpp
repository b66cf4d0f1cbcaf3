#include "train/run_config.hpp"

#include <fstream>


#include "core/error.hpp"
#include "model/activation_sizes.hpp"
#include "tensor/attention_choice.hpp"
#include "plugins/communicator.hpp"
#include "plugins/lr_schedule.hpp"
#include "plugins/optimizer.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_file.hpp"
#include "parallel/zero.hpp"
#include "data/token_shard.hpp"
#include "plugins/tokenizer.hpp"
#include "tensor/precision.hpp"
#include "train/loss_scale.hpp"

namespace gpt2 {

namespace {
// [model]: the GPT-2 shape.
std::vector<DeckField> model_fields(ModelConfig& model, Choice<AttentionKernels>& attention) {
  return {
      {"model.n_layer", &model.n_layer, "transformer blocks"},
      {"model.n_head", &model.n_head, "attention heads"},
      {"model.n_embd", &model.n_embd, "channels"},
      {"model.vocab_size", &model.vocab_size, "tokens (padded to a multiple of 128 internally)"},
      {"model.block_size", &model.block_size, "longest sequence the model supports"},
      {"model.attention", &attention,
       "auto (fused where measured faster: on the host from 512 tokens a sequence) | fused (no T x T matrix kept) | "
       "materialized (the probabilities kept); with parallel.cp > 1 attention is always fused (the ring)"},
  };
}

// [data]: the token shards, the sequence length, the tokenizer.
std::vector<DeckField> data_fields(DataConfig& data) {
  // The strategies' help lists what is registered.
  const std::string tokenizers = "auto | " + TokenizerRegistry::alternatives() + ": decodes printed samples";
  return {
      {"data.train", &data.train, "training shard path or glob"},
      {"data.val", &data.val, "validation shard path or glob (empty: no evaluation)"},
      {"data.seq_len", &data.seq_len, "tokens per sequence T"},
      {"data.shuffle", &data.shuffle, "seeded permutation of sequences per epoch"},
      {"data.tokenizer", &data.tokenizer, tokenizers},
      {"data.document_mask", &data.document_mask,
       "attention within documents, positions restarting at each (always for translation's packed examples)"},
      {"data.eot_token", &data.eot_token, "the token that ends a document (data.document_mask)"},
  };
}

// [train]: the step loop, the optimizer, evaluation and sampling, precision and recomputation.
std::vector<DeckField> train_fields(TrainConfig& train) {
  return {
      {"train.batch_size", &train.batch_size, "GLOBAL sequences per optimizer step"},
      {"train.steps", &train.steps, "optimizer steps"},
      {"train.lr", &train.lr, "peak learning rate"},
      {"train.min_lr", &train.min_lr, "final learning rate of cosine/noam"},
      {"train.warmup_steps", &train.warmup_steps, "linear warm-up steps"},
      {"train.optimizer", &train.optimizer, OptimizerRegistry::alternatives()},
      {"train.schedule", &train.schedule, "learning rate: " + LrScheduleRegistry::alternatives()},
      {"train.weight_decay", &train.weight_decay, "AdamW decay on tensors of rank >= 2"},
      {"train.grad_clip", &train.grad_clip, "max global gradient norm (<= 0: off)"},
      {"train.beta1", &train.beta1, "AdamW beta1"},
      {"train.beta2", &train.beta2, "AdamW beta2"},
      {"train.eps", &train.eps, "AdamW epsilon"},
      {"train.muon_lr", &train.muon_lr, "muon: the blocks' matrices' peak learning rate (the schedule scales it as train.lr)"},
      {"train.muon_momentum", &train.muon_momentum, "muon: momentum (Nesterov) of the blocks' matrices"},
      {"train.ns_steps", &train.ns_steps, "muon: Newton-Schulz steps orthogonalising each matrix's update"},
      {"train.ns_dtype", &train.ns_dtype, "muon: fp32 | bf16: the Newton-Schulz products' inputs (fp32 accumulation)"},
      {"train.seed", &train.seed, "seed for init, shuffling and sampling"},
      {"train.eval_every", &train.eval_every, "steps between validation passes (0: end only)"},
      {"train.eval_batches", &train.eval_batches, "batches per validation pass"},
      {"train.sample_every", &train.sample_every, "steps between printed samples (0: none)"},
      {"train.sample_tokens", &train.sample_tokens, "tokens per printed sample"},
      {"train.bleu_pairs", &train.bleu_pairs,
       "held-out translation pairs (source<TAB>target) for corpus BLEU after each epoch (empty: none)"},
      {"train.bleu_every", &train.bleu_every, "steps between BLEU evaluations (0: after each epoch and at the end)"},
      {"train.bleu_examples", &train.bleu_examples, "pairs translated for BLEU (0: all)"},
      {"train.bleu_tokens", &train.bleu_tokens, "most tokens of a translation for BLEU"},
      {"train.log_every", &train.log_every, "steps between progress lines"},
      {"train.tf32", &train.tf32,
       "TF32 tensor cores (CUDA) for the products left in fp32: auto (under bf16/fp16), true, false"},
      {"train.nonfinite", &train.nonfinite, "non-finite loss or gradient norm: stop | skip (the update)"},
      {"train.precision", &train.precision, "fp32 | bf16 | fp16: GEMM inputs and saved activations (fp32 master weights)"},
      {"train.recompute", &train.recompute,
       "none | selective (attention's probabilities recomputed in backward) | full (a block's forward re-run in its backward)"},
      {"train.recompute_every", &train.recompute_every, "recompute every this many blocks (block l when l % k == 0)"},
      {"train.loss_chunk_rows", &train.loss_chunk_rows,
       "the head's logits, loss and gradients this many rows at a time (0: automatic, 2^24 logits a block; 2^26 on a GPU)"},
      {"train.initial_loss_scale", &train.initial_loss_scale, "fp16: the dynamic loss scale's start"},
      {"train.loss_scale_window", &train.loss_scale_window, "fp16: clean steps before the loss scale doubles"},
      {"train.hardware", &train.hardware,
       "hardware file the run's step is predicted on (empty: the device's, from inputs/hardware)"},
      {"train.predict_warn", &train.predict_warn,
       "a measurement this far from the prediction (0.25: 25%) names the part that is off (0: never)"},
      {"train.straggler_every", &train.straggler_every,
       "steps between the ranks' comparison of their compute times, which names slow ranks (0: never)"},
      {"train.straggler_ratio", &train.straggler_ratio,
       "a rank whose compute is this many times its peers' median is named slow"},
      {"train.memory_warn", &train.memory_warn,
       "a rank whose peak memory passes this fraction of its limit is named (0: never)"},
      {"train.memory_limit_mb", &train.memory_limit_mb,
       "a rank's memory limit in MiB (0: its GPU's memory, or its share of the node's)"},
  };
}

// [parallel]: the grid, ZeRO, the pipeline schedule, communication and threads.
std::vector<DeckField> parallel_fields(ParallelConfig& parallel) {
  return {
      {"parallel.dp", &parallel.dp, "data-parallel replicas"},
      {"parallel.pp", &parallel.pp, "pipeline stages"},
      {"parallel.tp", &parallel.tp, "tensor-parallel ranks per layer (heads and MLP columns split; vocabulary-parallel loss)"},
      {"parallel.cp", &parallel.cp,
       "context-parallel ranks per sequence (2cp chunks, rank i holds i and 2cp-1-i; ring attention)"},
      {"parallel.sequence_parallel", &parallel.sequence_parallel, "with tp > 1: LayerNorms and residual stream split along the sequence"},
      {"parallel.zero", &parallel.zero, "ZeRO over dp: " + zero_level_choices(" | ", " | ") + " (1 optimizer state, 2 + gradients, 3 + parameters)"},
      {"parallel.microbatches", &parallel.microbatches, "microbatches per dp rank and step"},
      {"parallel.schedule", &parallel.schedule, "pipeline: " + ScheduleRegistry::alternatives()},
      {"parallel.virtual_stages", &parallel.virtual_stages, "interleaved: chunks of blocks per rank (round robin)"},
      {"parallel.schedule_file", &parallel.schedule_file,
       "a pipeline schedule written by hand (each rank's F, B, W passes; README): overrides parallel.schedule"},
      {"parallel.stage_layers", &parallel.stage_layers, "blocks per stage, e.g. [5, 7]"},
      {"parallel.bucket_mb", &parallel.bucket_mb, "gradient all-reduce bucket MiB (0: 1 with MPI, 25 with NCCL)"},
      {"parallel.comm", &parallel.comm, CommRegistry::alternatives()},
      {"parallel.host_threads", &parallel.host_threads, "Kokkos host threads per rank (0: the rank's share of the cores)"},
      {"parallel.blas_threads", &parallel.blas_threads, "host BLAS threads per rank (0: the rank's share of the cores)"},
      {"parallel.grad_reduce_dtype", &parallel.grad_reduce_dtype, "data-parallel gradient reduction on the wire: fp32 | bf16"},
      {"parallel.param_gather_dtype", &parallel.param_gather_dtype,
       "ZeRO's parameter all-gather: auto (the weight matrices as 16-bit values under bf16 / fp16) | fp32"},
  };
}

// [checkpoint]: where checkpoints go and how a run resumes.
std::vector<DeckField> checkpoint_fields(CheckpointConfig& checkpoint) {
  return {
      {"checkpoint.init_from", &checkpoint.init_from, "checkpoint or llm.c model file to start from"},
      {"checkpoint.dir", &checkpoint.dir, "checkpoint folder (empty: none)"},
      {"checkpoint.every", &checkpoint.every, "steps between checkpoints (0: end only)"},
      {"checkpoint.keep", &checkpoint.keep, "newest checkpoints kept in dir (0: all)"},
      {"checkpoint.format", &checkpoint.format,
       "h5 (one HDF5 file every rank writes its part of) | bin (one binary file, assembled on rank 0)"},
      {"checkpoint.async", &checkpoint.async,
       "h5: copy the state and write it from a background thread while training goes on"},
      {"checkpoint.resume", &checkpoint.resume,
       "true: continue from the newest checkpoint in dir | \"auto\": the same if there is one | false"},
  };
}

// [trace]: the HDF5 trace.
std::vector<DeckField> trace_fields(TraceConfig& trace) {
  return {
      {"trace.file", &trace.file, "HDF5 trace file (empty: no trace)"},
      {"trace.sync", &trace.sync, "fence device work around traced events"},
      {"trace.units", &trace.units, "also time each unit (embedding, block, head) in forward and backward"},
      {"trace.max_events", &trace.max_events, "events kept per rank"},
  };
}

}  // namespace

std::vector<DeckField> RunConfig::fields() {
  std::vector<DeckField> all;
  auto append = [&all](const std::vector<DeckField>& section) {
    all.insert(all.end(), section.begin(), section.end());
  };
  append(model_fields(model, attention));
  append(data_fields(data));
  append(train_fields(train));
  append(parallel_fields(parallel));
  append(checkpoint_fields(checkpoint));
  append(trace_fields(trace));
  return all;
}

RunConfig RunConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  InputDeck deck = InputDeck::from_file(path);
  for (const auto& o : overrides) deck.set(o);
  return from_deck(deck);
}

RunConfig RunConfig::from_deck(const InputDeck& deck) {
  RunConfig c;
  deck.bind(c.fields());
  // A hand-written schedule registers itself under its own name, which the run then uses.
  if (!c.parallel.schedule_file.empty()) c.parallel.schedule = register_schedule_file(read_schedule_file(c.parallel.schedule_file));
  return c;
}

// (fields() binds the members for reading and writing alike; to_toml only reads them.)
std::string RunConfig::toml() const { return InputDeck::to_toml(const_cast<RunConfig*>(this)->fields()); }

namespace {
// The counts and sizes: positive where they must be, the sequence within the model's, a shard given.
void check_counts(const RunConfig& c) {
  c.model.validate();
  auto positive = [](const char* key, int64_t v) {
    if (v <= 0) fail_input(key, "must be a positive integer, got ", v);
  };
  positive("data.seq_len", c.data.seq_len);
  positive("train.batch_size", c.train.batch_size);
  positive("train.steps", c.train.steps);
  positive("parallel.dp", c.parallel.dp);
  positive("parallel.pp", c.parallel.pp);
  positive("parallel.tp", c.parallel.tp);
  positive("parallel.microbatches", c.parallel.microbatches);
  positive("parallel.virtual_stages", c.parallel.virtual_stages);
  positive("train.log_every", c.train.log_every);
  if (c.train.eval_batches < 0) fail_input("train.eval_batches", "must be >= 0, got ", c.train.eval_batches);
  if (c.train.eval_every < 0) fail_input("train.eval_every", "must be >= 0, got ", c.train.eval_every);
  if (c.train.sample_every < 0) fail_input("train.sample_every", "must be >= 0, got ", c.train.sample_every);
  if (c.train.bleu_every < 0)
    fail_input("train.bleu_every", "must be >= 0 (0: after each epoch), got ", c.train.bleu_every);
  if (c.train.bleu_examples < 0)
    fail_input("train.bleu_examples", "must be >= 0 (0: all), got ", c.train.bleu_examples);
  if (c.train.bleu_tokens < 1) fail_input("train.bleu_tokens", "must be at least 1, got ", c.train.bleu_tokens);
  if (c.train.warmup_steps < 0) fail_input("train.warmup_steps", "must be >= 0, got ", c.train.warmup_steps);
  if (!(c.train.predict_warn >= 0))
    fail_input("train.predict_warn", "must be >= 0 (a fraction; 0: no warning), got ", c.train.predict_warn);
  if (c.train.straggler_every < 0)
    fail_input("train.straggler_every", "must be >= 0 (0: never compare), got ", c.train.straggler_every);
  if (!(c.train.straggler_ratio > 1))
    fail_input("train.straggler_ratio", "must be > 1 (1.2: 20% slower than its peers), got ", c.train.straggler_ratio);
  if (!(c.train.memory_warn >= 0 && c.train.memory_warn <= 1))
    fail_input("train.memory_warn", "must be in [0, 1] (a fraction of the limit; 0: never), got ", c.train.memory_warn);
  if (!(c.train.memory_limit_mb >= 0))
    fail_input("train.memory_limit_mb", "must be >= 0 (0: detected), got ", c.train.memory_limit_mb);
  if (!c.train.hardware.empty() && !std::ifstream(c.train.hardware))
    fail_input("train.hardware", "no readable hardware file at ", c.train.hardware, " (inputs/hardware has the project's)");
  if (c.checkpoint.every < 0) fail_input("checkpoint.every", "must be >= 0, got ", c.checkpoint.every);
  if (c.data.seq_len > c.model.block_size)
    fail_input("data.seq_len", "must be at most model.block_size (", c.model.block_size, "), got ",
               c.data.seq_len);
  if (c.data.train.empty()) fail_input("data.train", "is required: a token shard path or glob");
}

// The optimizer's numbers.
void check_optimizer(const RunConfig& c) {
  if (!(c.train.lr >= 0)) fail_input("train.lr", "must be >= 0, got ", c.train.lr);
  if (!(c.train.min_lr >= 0)) fail_input("train.min_lr", "must be >= 0, got ", c.train.min_lr);
  if (!(c.train.weight_decay >= 0)) fail_input("train.weight_decay", "must be >= 0, got ", c.train.weight_decay);
  if (!(c.train.beta1 >= 0 && c.train.beta1 < 1)) fail_input("train.beta1", "must be in [0, 1), got ", c.train.beta1);
  if (!(c.train.beta2 >= 0 && c.train.beta2 < 1)) fail_input("train.beta2", "must be in [0, 1), got ", c.train.beta2);
  if (!(c.train.eps > 0)) fail_input("train.eps", "must be > 0, got ", c.train.eps);
  if (!(c.train.muon_lr >= 0)) fail_input("train.muon_lr", "must be >= 0, got ", c.train.muon_lr);
  if (!(c.train.muon_momentum >= 0 && c.train.muon_momentum < 1))
    fail_input("train.muon_momentum", "must be in [0, 1), got ", c.train.muon_momentum);
  if (c.train.ns_steps < 1 || c.train.ns_steps > 20)
    fail_input("train.ns_steps", "must be in 1..20, got ", c.train.ns_steps);
}

// The strategies the deck names, and the ZeRO level.
void check_strategies(const RunConfig& c) {
  OptimizerRegistry::check(c.train.optimizer, "train.optimizer");
  LrScheduleRegistry::check(c.train.schedule, "train.schedule");
  ScheduleRegistry::check(c.parallel.schedule, "parallel.schedule");
  CommRegistry::check(c.parallel.comm, "parallel.comm");
  zero_policy(c.parallel.zero);
  if (c.data.tokenizer != "auto" && !TokenizerRegistry::find(c.data.tokenizer))
    fail_input("data.tokenizer", "expected auto, ", TokenizerRegistry::choices(), ", got ", c.data.tokenizer);
}

// The parallel layout: the threads, the layout's rules and pass lists, the grid against the ranks.
void check_parallel(const RunConfig& c, int world_size) {
  if (!(c.parallel.bucket_mb >= 0))
    fail_input("parallel.bucket_mb", "must be >= 0 (0: automatic), got ", c.parallel.bucket_mb);
  if (c.parallel.blas_threads < 0) fail_input("parallel.blas_threads", "must be >= 0, got ", c.parallel.blas_threads);
  if (c.parallel.host_threads < 0) fail_input("parallel.host_threads", "must be >= 0, got ", c.parallel.host_threads);
  // The layout's rules (one set, shared with the planner); then every rank's pass lists, proven.
  if (const LayoutProblem p = layout_problem(c.workload(), c.layout())) fail_input(p.key, p.message);
  build_pass_lists(c.pipeline_shape());
  const long long grid = c.grid().world();  // (int * int could overflow)
  if (world_size > 0 && grid != world_size)
    fail_input(std::string("parallel.dp * parallel.pp") + (c.parallel.cp > 1 ? " * parallel.cp" : "") +
                   (c.parallel.tp > 1 ? " * parallel.tp" : ""),
               "must equal the number of MPI ranks (", world_size, "), got ", c.parallel.dp, " * ", c.parallel.pp,
               c.parallel.cp > 1 ? " * " + std::to_string(c.parallel.cp) : std::string(),
               c.parallel.tp > 1 ? " * " + std::to_string(c.parallel.tp) : std::string(), " = ", grid);
}

// Checkpointing: how a run resumes, what it keeps, the format.
void check_checkpoint(const RunConfig& c) {
  if (c.checkpoint.resume != Toggle::off && c.checkpoint.dir.empty())
    fail_input("checkpoint.resume", "needs checkpoint.dir to be set");
  if (c.checkpoint.keep < 0) fail_input("checkpoint.keep", "must be >= 0 (0: keep all), got ", c.checkpoint.keep);
  if (c.checkpoint.async && c.checkpoint.format != CheckpointFormat::h5)
    fail_input("checkpoint.async", "needs checkpoint.format = \"h5\" (the binary format is assembled on rank 0)");
}

// Numerics: non-finite steps, precision, recomputation, the loss scale, the data-parallel wire types.
void check_numerics(const RunConfig& c) {
  if (c.attention == AttentionKernels::materialized && c.document_masks())
    fail_input("model.attention", "materialized attention cannot keep to documents (",
               c.data.document_mask ? "data.document_mask = true" : "data.train's shards are packed translation examples",
               "): use fused or auto");
  if (c.data.document_mask && (c.data.eot_token < 0 || c.data.eot_token >= c.model.vocab_size))
    fail_input("data.eot_token", "must be a token of the vocabulary [0, ", c.model.vocab_size, "), got ",
               c.data.eot_token);
  if (c.train.recompute_every < 1)
    fail_input("train.recompute_every", "must be at least 1 (1: every block), got ", c.train.recompute_every);
  if (c.train.loss_chunk_rows < 0)
    fail_input("train.loss_chunk_rows", "must be at least 0 (0: automatic), got ", c.train.loss_chunk_rows);
  // The loss-scale keys are fp16's, but a value that makes no sense is an error in any precision.
  if (!(c.train.initial_loss_scale > 0) || !(c.train.initial_loss_scale <= LossScale::kMax))
    fail_input("train.initial_loss_scale", "must be a positive finite number (at most 1e30), got ",
               c.train.initial_loss_scale);
  if (c.train.loss_scale_window < 1)
    fail_input("train.loss_scale_window", "must be at least 1 (clean steps before the scale doubles), got ",
               c.train.loss_scale_window);
}
}  // namespace

void RunConfig::validate(int world_size) const {
  check_counts(*this);
  check_optimizer(*this);
  check_strategies(*this);
  check_parallel(*this, world_size);
  check_checkpoint(*this);
  check_numerics(*this);
  if (trace.max_events <= 0) fail_input("trace.max_events", "must be positive, got ", trace.max_events);
}

bool RunConfig::fused_attention() const {
  return parallel.cp > 1 || document_masks() || attention == AttentionKernels::fused ||
         (attention == AttentionKernels::automatic && fused_attention_faster(data.seq_len));
}

bool RunConfig::document_masks() const { return data.document_mask || has_loss_masks(data.train); }

Workload RunConfig::workload() const { return {model, data.seq_len, train.batch_size}; }

Layout RunConfig::layout() const {
  Layout l;
  static_cast<GridKeys&>(l) = parallel;  // the deck's keys as read, whole
  static_cast<NumericsKeys&>(l) = train;
  // and what the run makes of them
  l.sequence_parallel = parallel.sequence_parallel && parallel.tp > 1;
  l.fused_attention = fused_attention();
  const OptimizerEntry* optimizer = OptimizerRegistry::find(train.optimizer);
  l.whole_matrices = optimizer && optimizer->whole_matrices;
  return l;
}

PassCosts RunConfig::pass_costs() const { return gpt2::pass_costs(model.n_embd, data.seq_len); }

PipelineShape RunConfig::pipeline_shape() const {
  return {parallel.schedule, parallel.pp, parallel.microbatches, parallel.virtual_stages, pass_costs()};
}

}  // namespace gpt2
