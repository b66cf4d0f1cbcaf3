#pragma once
// The one table of activation sizes: one microbatch's saved activations of a chunk of blocks (the
// Stage allocates its slots by it and checks its slicing against it) and the Stage's own scratch --
// what the performance model counts a rank's memory with. Values, not bytes: the stage's type T
// (fp32 here) and, under mixed precision, 16-bit GEMM inputs. Every slice is padded to 64 values.
#include <cstddef>

namespace gpt2 {

struct ActivationShape {
  int B = 1, seq_len = 1, n_embd = 1, n_head = 1, tp = 1;
  int blocks = 0;                    // blocks of the chunk
  bool first = false, last = false;  // the chunk holds the embedding / the head
  bool sequence_parallel = false;    // stream tensors on N / tp rows
  bool split = false;                // split backward: the input pass keeps what the weight pass needs
  bool mixed = false;                // 16-bit GEMM inputs
  int local_vocab = 0;               // the rank's vocabulary rows (the head's logits)
};

struct ActivationSizes {
  size_t values = 0, values16 = 0;    // one microbatch's saved activations
  size_t scratch = 0, scratch16 = 0;  // the stage's own buffers (B: the largest microbatch)
  double bytes(size_t t_bytes) const { return double(values) * t_bytes + double(values16) * 2; }
  double scratch_bytes(size_t t_bytes) const { return double(scratch) * t_bytes + double(scratch16) * 2; }
};

constexpr size_t pad_values(size_t n) { return (n + 63) / 64 * 64; }  // 256-byte aligned slices

ActivationSizes activation_sizes(const ActivationShape& s);

}  // namespace gpt2
