#pragma once
// Text generation with a one-stage model: the next token is drawn from the logits at the last
// position of the sequence so far (its last T tokens, T the stage's seq_len). With the KV cache
// (model/kv_decoder) the prompt runs once and then each new token alone against the cached keys
// and values; without it the whole window runs through the model at B = 1 for every token. Both
// see the same window at the same positions -- once the sequence outgrows T the window slides, and
// the cached way re-runs it too -- so they give the same tokens.
#include <memory>
#include <vector>

#include "core/rng.hpp"
#include "model/kv_decoder.hpp"
#include "model/stage.hpp"
#include "plugins/tokenizer.hpp"

namespace gpt2 {

struct SampleOptions {
  int tokens = 64;
  double temperature = 1.0;  // <= 0: greedy
  int top_k = 0;             // 0: all tokens
  bool kv_cache = true;      // false: recompute the window for every token
  int stop = -1;             // >= 0: a token that ends the generation (not returned)
};

// stage must hold the whole model (embedding and head). Returns the generated ids (prompt excluded).
// The KV cache needs the parameters in the stage's own buffers (KvDecoder::supports); a stage
// reading them from a store (the trainer's, one rank) recomputes the window instead.
std::vector<int> generate(Stage<float>& stage, const std::vector<int>& prompt, const SampleOptions& o,
                          Rng& rng);
// The same with a decoder made once (for many generations; o.kv_cache is not read).
std::vector<int> generate(KvDecoder<float>& decoder, const std::vector<int>& prompt, const SampleOptions& o,
                          Rng& rng);

// Tokenizer to decode samples: "byte", "gpt2", or "auto" (byte when vocab_size <= 256, gpt2 when it
// is 50257); a tokenizer that prints ids when none fits.
std::unique_ptr<Tokenizer> make_sample_tokenizer(const std::string& name, int vocab_size);

}  // namespace gpt2
