#pragma once
// Decoding with a key/value cache: every block keeps the keys and values of the positions decoded so
// far, so a new token runs through the model alone -- its query against the cached keys -- instead
// of the whole window again (the uncached way: Stage::forward over the last T tokens for every new
// one). append(tokens) runs n new tokens (a prompt at once, then one at a time) at the next
// positions and returns the logits of the last. They run through the Stage's own forward
// (Stage::decode: the training forward's embedding and blocks on the new rows, attention over the
// cache), so the values are the uncached way's, to rounding.
//
// It reads a Stage holding the whole model on one rank in its own buffers, in T (fp32 or double,
// without 16-bit GEMMs) -- sampling's, as `gpt2 sample` and the trainer's samples make it; the stage
// must outlive it. Holds a (max_len, 2C) cache per block and one block's activations for max_len rows.
#include "model/stage.hpp"

namespace gpt2 {

template <class T>
class KvDecoder {
 public:
  // max_len: the most positions cached (<= the model's block_size); 0: the stage's seq_len.
  explicit KvDecoder(Stage<T>& stage, int max_len = 0);
  // Whether it can decode on the stage: the whole model, one rank, in the stage's own buffers, in T.
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
  Stage<T>& stage_;
  int max_len_, len_ = 0;
  int64_t rows_ = 0;
  Buffer<T> kv_;      // (n_layer, max_len, 2C)
  Buffer<T> scores_;  // attention's scratch: n_head x max_len x max_len
  Buffer<T> logits_;  // (Vp)
  Activations<T> a_;  // Stage::make_decoding's, over kv_ and scores_
};

}  // namespace gpt2
