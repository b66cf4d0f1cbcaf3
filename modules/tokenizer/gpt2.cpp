// Registers GPT-2's BPE (gpt2_bpe.cpp) as the tokenizer "gpt2", its files defaulting to the copies
// job_scripts/fetch_gpt2_vocab.sh caches.
#include <fstream>

#include "core/error.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"

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

[[maybe_unused]] const bool registered = TokenizerRegistry::add(
    {"gpt2", "GPT-2's byte-level BPE (50257 ids; encoder.json + vocab.bpe)", 1, 50257,
     [](const TokenizerFiles& f) -> std::unique_ptr<Tokenizer> {
       return Gpt2Bpe::load(gpt2_file(f.vocab, "encoder.json"), gpt2_file(f.merges, "vocab.bpe"));
     }});
}  // namespace

}  // namespace gpt2
