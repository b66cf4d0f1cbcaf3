#pragma once
// Text generation with a one-stage model: the sequence so far (its last T tokens) runs through the
// model at B = 1 and the next token is drawn from the logits at the last position.
#include <memory>
#include <vector>

#include "core/rng.hpp"
#include "model/stage.hpp"
#include "runtime/tokenizer.hpp"

namespace gpt2 {

struct SampleOptions {
  int tokens = 64;
  double temperature = 1.0;  // <= 0: greedy
  int top_k = 0;             // 0: all tokens
};

// stage must hold the whole model (embedding and head). Returns the generated ids (prompt excluded).
std::vector<int> generate(Stage<float>& stage, const std::vector<int>& prompt, const SampleOptions& o,
                          Rng& rng);

// Tokenizer to decode samples: "byte", "gpt2", or "auto" (byte when vocab_size <= 256, gpt2 when it
// is 50257); a tokenizer that prints ids when none fits.
std::unique_ptr<Tokenizer> make_sample_tokenizer(const std::string& name, int vocab_size);

}  // namespace gpt2
