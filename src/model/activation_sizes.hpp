#pragma once
// The one table of activation sizes: one microbatch's saved activations of a chunk of blocks (the
// Stage allocates its slots by it and checks its slicing against it) and the Stage's own scratch --
// what the performance model counts a rank's memory with. Values, not bytes: the stage's type T
// (fp32 here) and, under mixed precision, 16-bit GEMM inputs. Every slice is padded to 64 values.
#include <cstddef>
#include <string>

#include "core/choice.hpp"

namespace gpt2 {

// Activation recomputation (train.recompute): none keeps every block's activations; selective drops
// attention's probabilities (B x heads x T x T, the largest) and recomputes them from the saved
// q, k, v in backward; full keeps a block's output only (the next block's input) and re-runs the
// block's forward inside its backward -- under a split backward it keeps the weight pass's inputs
// too and recomputes q, k, v, attention and fc once, in the input pass. Recomputed blocks share one set of the dropped tensors (the
// stage's scratch). Which blocks: every `every`-th, block l when l % every == 0.
enum class Recompute { none, selective, full };
template <>
struct Words<Recompute> {
  static inline const WordList list{"none", "selective", "full"};
};
inline const char* recompute_name(Recompute r) { return word(r); }
inline bool is_recomputed(Recompute r, int every, int layer) { return r != Recompute::none && layer % every == 0; }
int recomputed_blocks(Recompute r, int every, int first, int end);  // among blocks [first, end)

struct ActivationShape {
  int B = 1, seq_len = 1, n_embd = 1, n_head = 1, tp = 1;  // seq_len: the rank's tokens of a sequence
  int cp = 1;  // context parallelism: ring attention keeps a log-sum-exp per row and head, not T x T
  bool fused_attention = false;      // so does fused attention (the ring always is)
  int blocks = 0;                    // blocks of the chunk
  bool first = false, last = false;  // the chunk holds the embedding / the head
  bool sequence_parallel = false;    // stream tensors on N / tp rows
  bool split = false;                // split backward: the input pass keeps what the weight pass needs
  bool mixed = false;                // 16-bit GEMM inputs
  int local_vocab = 0;               // the rank's vocabulary rows (the head's logits)
  int loss_rows = 0;                 // train.loss_chunk_rows as asked (0: automatic; loss_chunk_rows)
  int first_block = 0;               // the chunk's first block (which blocks recompute)
  Recompute recompute = Recompute::none;
  int recompute_every = 1;
};

struct ActivationSizes {
  size_t values = 0, values16 = 0;    // one microbatch's saved activations
  size_t scratch = 0, scratch16 = 0;  // the stage's own buffers (B: the largest microbatch)
  double bytes(size_t t_bytes) const { return double(values) * t_bytes + double(values16) * 2; }
  double scratch_bytes(size_t t_bytes) const { return double(scratch) * t_bytes + double(scratch16) * 2; }
};

constexpr size_t pad_values(size_t n) { return (n + 63) / 64 * 64; }  // 256-byte aligned slices

ActivationSizes activation_sizes(const ActivationShape& s);

// The head computes the logits, the loss and their gradients a block of rows at a time, so the whole
// (N, V) logits never exist (train.loss_chunk_rows): `requested` rows (0: as many as keep a block's
// logits within loss_chunk_values() values), at most the N rows there are.
size_t loss_chunk_values();  // 2^24 (64 MiB of fp32) on the host, 2^26 on a GPU
size_t loss_chunk_rows(int requested, size_t N, size_t local_vocab);

}  // namespace gpt2
