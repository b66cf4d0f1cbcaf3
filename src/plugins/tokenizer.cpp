#include "plugins/tokenizer.hpp"

namespace gpt2 {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const TokenizerFiles& files) {
  return TokenizerRegistry::get(name, "tokenizer").make(files);
}

}  // namespace gpt2
