#pragma once
// Text <-> token ids. Implementations live in modules/tokenizer (byte, gpt2) and register themselves.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plugins/registry.hpp"

namespace gpt2 {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  // End-of-text id written between documents by `gpt2 prepare`, or -1 if the tokenizer has none.
  virtual int eot() const = 0;
  // Throws InputError naming `source` (e.g. the file) when the text cannot be encoded.
  virtual std::vector<int> encode(std::string_view text, const std::string& source = "text") const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;
};

struct TokenizerFiles {
  std::string vocab;   // GPT-2 encoder.json
  std::string merges;  // GPT-2 vocab.bpe
};

struct TokenizerEntry {
  std::string name, help;
  int order = 0;
  int vocab_size = 0;  // ids it produces (for choosing one that fits a model)
  std::function<std::unique_ptr<Tokenizer>(const TokenizerFiles&)> make;
};
using TokenizerRegistry = Registry<TokenizerEntry>;

// name: a registered tokenizer. For gpt2, empty file names mean the cached copies fetched by
// job_scripts/fetch_gpt2_vocab.sh. Throws InputError for an unknown name or unreadable files.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const TokenizerFiles& files = {});

}  // namespace gpt2
