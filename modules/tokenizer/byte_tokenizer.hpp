#pragma once
// The byte tokenizer: token id i is the byte i (0..255). No end-of-text token. Every byte string
// encodes, so encode never throws; decode is its exact inverse.
#include "plugins/tokenizer.hpp"

namespace gpt2 {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int vocab_size() const override { return 256; }
  int eot() const override { return -1; }
  std::vector<int> encode(std::string_view text, const std::string& source = "text") const override;
  // Throws InputError("tokens", ...) for an id outside 0..255.
  std::string decode(const std::vector<int>& ids) const override;
};

}  // namespace gpt2
