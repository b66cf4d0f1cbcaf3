// The tokenizer registry: name -> implementation (modules/tokenizer).
#include <fstream>

#include "core/error.hpp"
#include "modules/tokenizer/byte_tokenizer.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"
#include "runtime/tokenizer.hpp"

namespace gpt2 {

namespace {
std::string gpt2_file(const std::string& given, const char* cached_name) {
  if (!given.empty()) return given;  // an explicit file's errors come from Gpt2Bpe::load
  const std::string path = gpt2_vocab_cache_dir() + "/" + cached_name;
  if (!std::ifstream(path).good())
    fail_input(path, "GPT-2 tokenizer file not found; run job_scripts/fetch_gpt2_vocab.sh (fills ",
               "${GPT2_CACHE:-$HOME/.cache/gpt2-kokkos}/gpt2-vocab) or pass --vocab encoder.json ",
               "--merges vocab.bpe");
  return path;
}
}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const TokenizerFiles& files) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") {
    const std::string vocab = gpt2_file(files.vocab, "encoder.json");
    const std::string merges = gpt2_file(files.merges, "vocab.bpe");
    return Gpt2Bpe::load(vocab, merges);
  }
  fail_input("tokenizer", "expected byte or gpt2, got ", name.empty() ? "\"\"" : name);
}

}  // namespace gpt2
