#pragma once
// A pipeline stage of GPT-2: blocks [first_layer, end_layer) plus the embedding (first stage) and the
// final LayerNorm + tied LM head (last stage). With one stage this is the whole model.
//
// forward(a) runs one microbatch and saves what backward needs in `a`. On the head stage it also
// runs the loss backward and the LM-head backward right away (their inputs are all there), so the
// (N, Vp) logits are never kept per microbatch: only dlnf (N,C) is.
// backward(a) then runs the rest from the stage's gradient buffer dres: on entry it holds the
// gradient of the stage output (received from the next stage; ignored on the head stage), on exit the
// gradient of the stage input (to send back; the first stage consumes it in the embedding backward).
// Parameters are read and gradients accumulated (+=) through a UnitStore, one unit (a block, wte,
// ...) at a time; by default the stage keeps both in its own flat buffers `params` and `grads`.
//
// Tensor parallelism (the layout's TpSplit, collectives through a TpGroup): attention heads and the
// MLP's hidden columns are divided over the tp ranks; a block does one all-reduce after each
// row-parallel projection in forward and one after each column-parallel input gradient in backward
// (Megatron's g and f); the row-parallel biases are added once. The embedding is vocabulary-parallel
// (masked lookup, all-reduced) and the loss too (crossentropy's vocabulary-parallel passes), so no
// rank holds the whole logits. With sequence parallelism the LayerNorms and the residual stream
// keep 1/tp of the rows (N/tp x C): all-gathers before and reduce-scatters after the tensor-parallel
// regions replace the all-reduces, and the gradients of the replicated tensors (LayerNorms, biases,
// wpe) are partial sums that the caller adds up over tp.
#include <functional>
#include <memory>
#include <vector>

#include "model/activation_sizes.hpp"
#include "model/linear.hpp"
#include "model/cp_ring.hpp"
#include "model/stage_layout.hpp"
#include "model/stage_parts.hpp"
#include "model/tp_group.hpp"
#include "model/unit_store.hpp"
#include "tensor/token_groups.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// Document masks (StageOptions.document_masks): each row's document start, a position in its
// sequence (every stage: attention keeps to it); first stage: each row's position in its document
// (the position embedding's index) and the rows grouped by it (the wpe gradient's order).
struct DocumentRows {
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> doc_starts, doc_positions;
  TokenGroups position_groups;
  DocStarts docs() const { return doc_starts; }  // empty without document masks
};

template <class T>
struct Activations : DocumentRows {
  struct Block {
    // The GEMMs' saved inputs (16-bit under mixed precision) and the rest (always T).
    GemmInput<T> ln1, atty, ln2, fch_gelu;
    Mat<T> qkv, att, res2, fch, res3;
    Vec<T> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    // Split backward only: what the input pass leaves for the weight pass -- the gradients at the
    // block's output (d3) and at res2 (d2), at the projections' inputs (dfch, dqkv) and at the
    // LayerNorms' outputs (dln2, dln1).
    Mat<T> d3, d2, dfch, dqkv, dln2, dln1;
  };
  int B = 0, seq_len = 0;
  Buffer<T> mem;           // one allocation; the views below are slices of it
  Buffer<uint16_t> mem16;  // mixed precision: the 16-bit GemmInputs' allocation
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> tokens, targets;  // (N) first / head stage
  TokenGroups groups;  // first stage: the tokens' rows grouped by token (the wte gradient's order)
  Mat<T> input;                                                       // (rows,C) stage input
  std::vector<Block> blocks;
  Vec<T> lnf_mean, lnf_rstd;  // head stage
  Mat<T> dlnf;                // head stage: gradient at the final LayerNorm's output
  Mat<T> dembed;              // split backward, first stage: gradient at the embedding's output
  int rows() const { return B * seq_len; }              // tokens of the microbatch, N
  using PinnedInts = Kokkos::View<const int*, Kokkos::LayoutRight, PinnedMemory, Kokkos::MemoryUnmanaged>;
  // The microbatch's tokens and targets (N each; either may be null) from page-locked host memory,
  // copied on the execution space's stream, and the tokens' groups built in `group_staging`
  // (page-locked, TokenGroups::table_size(N) ints; first stage). None of the three is written again
  // before the step's whole-device wait: the host does not wait for these copies.
  void load(const int* host_tokens, const int* host_targets, int* group_staging) {
    const size_t N = size_t(rows());
    if (host_tokens) {
      Kokkos::deep_copy(ExecSpace(), tokens, PinnedInts(host_tokens, N));
      if (groups.table.extent(0)) group_tokens(groups, host_tokens, int(N), group_staging);
    }
    if (host_targets) Kokkos::deep_copy(ExecSpace(), targets, PinnedInts(host_targets, N));
  }
  // Document masks: the rows' document starts and positions (N each, page-locked as above), the
  // positions' groups built in `group_staging` (TokenGroups::table_size(N) ints; first stage).
  void load_documents(const int* host_starts, const int* host_positions, int* group_staging) {
    const size_t N = size_t(rows());
    Kokkos::deep_copy(ExecSpace(), doc_starts, PinnedInts(host_starts, N));
    if (doc_positions.extent(0)) {
      Kokkos::deep_copy(ExecSpace(), doc_positions, PinnedInts(host_positions, N));
      group_tokens(position_groups, host_positions, int(N), group_staging);
    }
  }
  // The same with the groups built in host memory of its own (tests and tools, outside a step).
  void load(const int* host_tokens, const int* host_targets) {
    group_host.resize(TokenGroups::table_size(rows()));
    load(host_tokens, host_targets, group_host.data());
    Kokkos::fence();  // device_sync-ok: outside a step (group_host is written again by the next load)
  }
  std::vector<int> group_host;
  // Decoding (Stage::decode): the rows are new positions [position, position + rows) of one
  // sequence, every block's slices the same memory; each block's attention reads and extends its
  // cached keys and values (kv[block]: max_len x 2C) with `scores` (n_head x rows x (position +
  // rows) values) as scratch. Empty kv: a training microbatch.
  struct Decoding {
    int position = 0;
    std::vector<Mat<T>> kv;
    Vec<T> scores;
  };
  Decoding decoding;
  Mat<T> output() const { return blocks.back().res3; }  // (rows,C) sent to the next stage
  size_t bytes() const { return mem.extent(0) * sizeof(T) + mem16.extent(0) * sizeof(uint16_t); }
};

// The parts of a microbatch's work on a stage: forward, the whole backward, or the backward split
// into its input pass (B: input gradients, sent upstream at once) and weight pass (W: weight and bias
// gradients, LayerNorm parameters, the embedding; schedulable later).
enum class Pass { forward, backward, backward_input, backward_weight };

// Called at the start and end of each model unit's part of a pass (for timing): the pass, the unit
// (0 embedding, 1 + l block l, n_layer + 1 the head and loss), begin?
using StageProbe = std::function<void(Pass pass, int unit, bool begin)>;

template <class T>
struct StageOptions {
  UnitStore<T>* store = nullptr;   // where parameters and gradients live (null: the stage's own)
  TpGroup<T>* tp = nullptr;        // the layout's tensor-parallel group (null: one rank)
  CpRing<T>* cp = nullptr;         // context parallelism's ring (null: one rank holds whole sequences)
  bool sequence_parallel = false;  // LayerNorms and residuals on N / tp rows
  int chunk = 0;                   // which of the layout's chunks (virtual stages) this stage runs
  Precision precision = Precision::fp32;  // GEMM inputs and their saved activations (model/linear.hpp)
  StageProbe probe;                // optional
  Recompute recompute = Recompute::none;  // activation recomputation (model/activation_sizes.hpp)
  int recompute_every = 1;                // of every this many blocks, the first
  std::function<void(int unit, bool begin)> on_recompute;  // optional: bounds of each recomputation
  // model.attention: fused (tensor/flash_attention.hpp: no T x T matrix) or materialized (the
  // probabilities kept for the backward). Context parallelism's ring is always fused.
  bool fused_attention = false;
  int loss_chunk_rows = 0;  // train.loss_chunk_rows: the head's logits a block of rows at a time (0: automatic)
  // Attention within documents, positions restarting at each (Activations::load_documents); fused
  // attention only.
  bool document_masks = false;
};

// The stage itself is the block's math (stage_block.cpp, stage_attention.cpp), the ends
// (stage_ends.cpp) and the order of a microbatch's passes; it composes the parts of
// model/stage_parts.hpp -- the tp / sp / cp wiring, the scratch the passes share, recomputation, the
// kernels it runs -- and Linear (model/linear.hpp: the precision and its working copies).
template <class T>
class Stage {
 public:
  // max_batch: the most sequences one microbatch holds; seq_len: T (with context parallelism the
  // rank holds T / cp tokens of each: its chunks i and 2cp-1-i of 2cp).
  Stage(const StageLayout& layout, int max_batch, int seq_len, StageOptions<T> options = {});

  const StageLayout& layout() const { return layout_; }  // the rank's (all its chunks)
  const ModelConfig& config() const { return layout_.global().config(); }
  int chunk() const { return chunk_; }
  int first_layer() const { return first_; }   // this stage's blocks: [first_layer, end_layer)
  int end_layer() const { return end_; }
  bool has_embedding() const { return first_ == 0; }
  bool has_head() const { return end_ == config().n_layer; }
  bool document_masks() const { return k_.document_masks; }  // every stage then loads each microbatch's documents
  int seq_len() const { return par_.seq; }  // the rank's tokens of a sequence (T / cp)
  int max_batch() const { return buf_.max_batch; }
  bool sequence_parallel() const { return par_.sp; }
  // Rows of the residual stream this rank holds for a microbatch of B sequences: B*T, or B*T / tp.
  int stream_rows(int B) const { return par_.stream_rows(B); }
  Precision precision() const { return lin_.precision(); }
  size_t gemm16_scratch_bytes() const { return lin_.scratch_bytes(); }  // (made at set-up, at its largest)
  // What recomputed blocks share (train.recompute): counted with the activations it stands in for.
  size_t recompute_bytes() const { return rc_.bytes(); }

  // The stage's own flat buffers in the local layout (empty with an external store).
  Buffer<T> params;
  Buffer<T> grads;

  // Own buffers: GPT-2 initialisation (model/param_init: values by global position, so any split
  // gives the same values as the one-stage model), and zeroing the gradients.
  void init_params(uint64_t seed);
  void zero_grads();
  // Own buffers: hears every UnitStore::grads_done (unit index, in forward), e.g. to see the order
  // in which gradients complete.
  void on_grads_done(std::function<void(int, bool)> f);

  // Saved-activation storage for a microbatch of B <= max_batch sequences (split: with room for
  // what a split backward's input pass leaves for its weight pass).
  Activations<T> make_activations(int B, bool split = false) const;
  // The shape the size table (model/activation_sizes) takes for this stage's microbatches of B.
  ActivationShape activation_shape(int B, bool split = false) const;

  // Forward one microbatch. First stage reads a.tokens; other stages read a.input.
  // Head stage: writes per-token losses (N) and, when need_grad, runs the loss + LM-head backward
  // with d(loss)/d(each token loss) = dloss.
  void forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss);

  // Decoding with a key/value cache (model/kv_decoder; the whole model on one rank, in T):
  // activations for up to max_rows new rows of one sequence, over the cache `kv` (n_layer x max_len x
  // 2C values) with attention scratch `scores` (n_head x max_rows x max_len values), both the caller's.
  Activations<T> make_decoding(int max_rows, int max_len, Vec<T> kv, Vec<T> scores) const;
  // Tokens host_tokens[0, n) at positions [position, position + n) through the training forward's
  // embedding and blocks, their attention over every cached position (which they extend); the final
  // LayerNorm and the logits (Vp) of the last of them into `logits`.
  void decode(Activations<T>& a, const int* host_tokens, int n, int position, Vec<T> logits);

  // Backward one microbatch (see the header comment for dres). Each unit's gradient is handed to
  // the store (grads_done) as soon as this microbatch's part of it is complete: the final norm
  // first, then the blocks from the last, then the embeddings.
  void backward(Activations<T>& a);
  // The same in two passes (activations made with split = true): backward_input computes the input
  // gradients through every layer (dres on exit as after backward), backward_weight then the weight
  // and bias gradients from what it kept, handing the units over. Together: the same gradients.
  void backward_input(Activations<T>& a);
  void backward_weight(Activations<T>& a);

  // Head stage, one tensor-parallel rank: the (B*T, Vp) logits of the last forward run with
  // need_grad = false.
  Mat<T> logits(int B) const { return Mat<T>(buf_.logits.data(), size_t(B) * par_.seq, layout_.local_vocab()); }

  // Gradient of the stage output (in) / stage input (out) for the microbatch in backward.
  Mat<T> dres(int B) const { return Mat<T>(buf_.dres.data(), size_t(stream_rows(B)), config().n_embd); }

 private:
  // The constructor's parts: the store and the single-rank groups it makes where none were given;
  // the scratch buffers for max_batch, and the part recomputed blocks share; the check that they
  // take what the size table says.
  void make_missing_parts();
  void allocate_scratch(int max_batch);
  void allocate_recompute_scratch(int max_batch, const ActivationSizes& sizes);
  void check_scratch(const ActivationSizes& sizes) const;
  // Activations of a shape: allocated as the size table says, and cut into slices (again, for fewer
  // rows, in the same memory: decoding); slice_activations returns the values and 16-bit values taken.
  Activations<T> allocate_activations(const ActivationShape& shape) const;
  std::pair<size_t, size_t> slice_activations(Activations<T>& a, const ActivationShape& shape) const;
  ActivationShape decoding_shape(int rows) const;  // one sequence of `rows`, one block's memory for all
  struct BlockParams {
    Vec<T> ln1w, ln1b, qkvb, attprojb, ln2w, ln2b, fcb, fcprojb;
    Mat<T> qkvw, attprojw, fcw, fcprojw;
  };
  // Views of one block's tensors in a unit's memory (parameters or gradients).
  BlockParams block_view(const T* unit, int layer) const;
  // The block's weight matrices as its GEMMs read them (gemm_weight each).
  struct GemmWeights {
    GemmInput<T> qkvw, attprojw, fcw, fcprojw;
  };
  GemmWeights gemm_weights(int u, const T* unit, const BlockParams& p);
  // A weight matrix w (a view into `unit`, unit u's parameters) as a GEMM reads it: the store's
  // 16-bit working copy at the same place where it keeps one, else w itself (rounded per GEMM).
  GemmInput<T> gemm_weight(int u, const T* unit, CMat<T> w);
  Vec<T> unit_vec(const T* unit, int u, Param kind) const;  // one tensor of a (non-block) unit
  int block_unit(int layer) const { return layout_.unit_index(UnitKind::block, layer); }
  // Whether a writer of g, part of unit u's gradient, stores into it (UnitStore::first_write; marks it
  // written): a product whose library stores faster, where nothing was added yet; a scatter adds.
  bool first_write(int u, Mat<T> g, bool product) {
    return store_->first_write(u, g.data(), g.size(), product && lin_.stores_faster());
  }
  // A block matrix's weight gradient dw, part of unit u's, += dout^T @ act: the product, its one writer
  // in a microbatch, asks first_write and then tells the store it wrote (UnitStore::wrote).
  void weight_gradient(int u, Mat<T> dw, const GemmInput<T>& dout, const GemmInput<T>& act) {
    lin_.backward_weight(dw, Vec<T>(), dout, act, first_write(u, dw, true));
    store_->wrote(u, dw.data(), dw.size());
  }
  void embedding_forward_(Activations<T>& a);
  void embedding_backward_(Activations<T>& a, CMat<T> d);
  void forward_blocks(Activations<T>& a);  // the embedding (first stage) and the blocks
  void block_forward(int layer, Activations<T>& a, CMat<T> in, bool recomputing = false);
  // Fused attention (tensor/flash_attention.hpp), under context parallelism over the ring's K/V
  // blocks: y and the log-sum-exp per row and head out, and their backward into dqkv.
  bool fused() const { return k_.fused_attention || par_.cp->size() > 1; }
  void fused_attention_forward(Mat<T> y, Vec<T> lse, CMat<T> qkv, int B, DocStarts doc);
  void fused_attention_backward(Mat<T> dqkv, CMat<T> dy, CMat<T> qkv, CMat<T> y, CVec<T> lse, int B, DocStarts doc);
  void recompute_block(int layer, Activations<T>& a, CMat<T> in, bool split);
  void attention(typename Activations<T>::Block& s, int B, DocStarts doc, bool keep_output);
  void cached_attention(typename Activations<T>::Block& s, const typename Activations<T>::Decoding& d, int block);
  bool recomputed(int layer) const { return rc_.covers(layer); }
  void block_backward(int layer, Activations<T>& a, CMat<T> in, Pass pass);
  void head_forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss);
  void decode_head(Activations<T>& a, CMat<T> row, Vec<T> logits);  // one row's final LayerNorm and logits
  template <class S>
  void final_norm(Mat<S> out, Vec<T> mean, Vec<T> rstd, CMat<T> in);  // the final LayerNorm of in's rows
  void head_backward(Activations<T>& a, Pass pass);
  void run_backward(Activations<T>& a, Pass pass);
  // dln (stream rows) = the tp ranks' sum of dout (N, out) @ w: a column-parallel input gradient.
  void column_parallel_input(Mat<T> dln, const GemmInput<T>& dout, const GemmInput<T>& w, int B);
  void parallel_loss(Mat<T> logits, Tokens targets, Vec<T> losses, bool need_grad, T dloss);
  // The head's rows [r0, r0 + n): logits, loss and (need_grad) their gradients, d(lnf) into din.
  void head_rows(Activations<T>& a, size_t r0, size_t n, const GemmInput<T>& lnf_rows, const GemmInput<T>& wte,
                 Mat<T> din, Vec<T> losses, bool need_grad, T dloss);

  // Brackets a unit's part of the forward or backward for the probe.
  struct Probed {
    const StageProbe& probe;
    Pass pass;
    int unit;
    Probed(const StageProbe& p, Pass s, int u) : probe(p), pass(s), unit(u) {
      if (probe) probe(pass, unit, true);
    }
    ~Probed() {
      if (probe) probe(pass, unit, false);
    }
  };
  int head_unit_id() const { return config().n_layer + 1; }

  StageLayout layout_;
  std::unique_ptr<FlatStore<T>> own_;  // when no store was given
  UnitStore<T>* store_;
  StageParallel<T> par_;
  StageProbe probe_;
  Recomputation<T> rc_;
  StageKernels k_;
  int chunk_, first_, end_;
  StageScratch<T> buf_;
  Linear<T> lin_;
};

}  // namespace gpt2
