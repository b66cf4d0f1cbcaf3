#pragma once
// Decoding with a key/value cache: every block keeps the keys and values of the positions decoded so
// far, so a new token runs through the model alone -- its query against the cached keys -- instead
// of the whole window again (the uncached way: Stage::forward over the last T tokens for every new
// one). append(tokens) runs n new tokens (a prompt at once, then one at a time) at the next
// positions and returns the logits of the last. The values are the Stage's (the same kernels on
// fewer rows), to rounding.
//
// It reads the parameters of a Stage holding the whole model on one rank in its own buffers
// (sampling's, as `gpt2 sample` and the trainer's samples make it), fp32 or double; the stage must
// outlive it. Holds per block a (max_len, 2C) cache and scratch for max_len rows.
#include "model/stage.hpp"

namespace gpt2 {

// The rows one append runs, each block's intermediate values in turn (max_len rows at most), and
// the head's one row.
template <class T>
struct DecoderScratch {
  Buffer<T> x, res2, ln, qkv, atty, fch, gelu, att, mean, rstd, lnf, logits;
  DecoderScratch(size_t rows, const ModelConfig& c, size_t local_vocab);
};

template <class T>
class KvDecoder {
 public:
  // max_len: the most positions cached (<= the model's block_size); 0: the stage's seq_len.
  explicit KvDecoder(const Stage<T>& stage, int max_len = 0);
  // Whether it can read the stage: the whole model, one rank, in the stage's own buffers.
  static bool supports(const Stage<T>& stage);
  const ModelConfig& config() const { return stage_.config(); }
  int capacity() const { return max_len_; }
  int length() const { return len_; }  // positions cached
  int64_t rows_run() const { return rows_; }  // tokens run through the model since construction
  void reset() { len_ = 0; }           // forget them (the parameters may have changed)
  // Runs host_tokens[0, n) at positions [length, length + n) (length + n <= capacity), caches their
  // keys and values, and returns the (padded) vocabulary's logits at the last of them: a device view,
  // valid until the next call.
  Vec<T> append(const int* host_tokens, int n);

 private:
  static int checked_length(const Stage<T>& stage, int max_len);  // max_len's positions, or fail
  const Stage<T>& stage_;
  int max_len_, len_ = 0;
  int64_t rows_ = 0;
  Buffer<T> kv_;  // (n_layer, max_len, 2C)
  DecoderScratch<T> s_;
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> tokens_;
};

}  // namespace gpt2
