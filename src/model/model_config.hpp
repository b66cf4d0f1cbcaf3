#pragma once
// GPT-2 shape. The vocabulary is padded to a multiple of 128 for aligned GEMMs (llm.c does the same);
// padded rows of wte stay zero and their logits are ignored by the loss.
#include <string>

namespace gpt2 {

struct ModelConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int block_size = 1024;  // longest sequence (rows of wpe)

  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return n_embd / n_head; }
  // ParamLayout(*this).total() without building it, in double: no shape read from a damaged file
  // can overflow it, and it is exact below 2^53. Check it before allocating for a shape.
  double param_count() const {
    const double C = n_embd;
    return (double(padded_vocab()) + block_size) * C + n_layer * (12 * C * C + 13 * C) + 2 * C;
  }
  // Throws InputError naming the offending model.* key.
  void validate() const;
  bool operator==(const ModelConfig& o) const {
    return n_layer == o.n_layer && n_head == o.n_head && n_embd == o.n_embd &&
           vocab_size == o.vocab_size && block_size == o.block_size;
  }
  // "n_layer=12 n_head=12 n_embd=768 vocab_size=50257 block_size=1024"
  std::string describe() const;
  // What differs from `o`, e.g. "n_layer: 12 here, 6 there"; empty when equal.
  std::string diff(const ModelConfig& o) const;
};

}  // namespace gpt2
