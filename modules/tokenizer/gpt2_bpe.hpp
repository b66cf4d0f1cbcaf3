#pragma once
// GPT-2's byte-level BPE tokenizer (vocabulary of 50257 = 256 bytes + 50000 merges + <|endoftext|>).
//
//  1. Pre-tokenisation splits the UTF-8 text exactly as GPT-2's regex
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     does (hand-written matcher over code points; \p{L}, \p{N} from the generated
//     unicode_tables.hpp; \s is JavaScript's \s, because the reference is the JS encoder).
//     The byte map, UTF-8 and this matcher are in gpt2_text.hpp.
//  2. Each piece's bytes start as single-byte tokens; merges from vocab.bpe are applied by rank
//     (the lowest-ranked adjacent pair, all its occurrences left to right, repeatedly).
//     Results are cached per piece.
// Token strings in encoder.json use GPT-2's byte<->unicode map; they are turned into raw bytes
// at load, so everything after loading works on bytes and ids.
// "<|endoftext|>" in the text is encoded as ordinary text (as GPT-2's encoder does); eot() is
// only ever written by the caller between documents.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plugins/tokenizer.hpp"

namespace gpt2 {

// ${GPT2_CACHE:-$HOME/.cache/gpt2-kokkos}/gpt2-vocab, where job_scripts/fetch_gpt2_vocab.sh puts
// encoder.json and vocab.bpe.
std::string gpt2_vocab_cache_dir();

class Gpt2Bpe final : public Tokenizer {
 public:
  // Reads encoder.json (flat JSON object: token string -> id) and vocab.bpe (merges, one
  // "A B" pair a line, after a "#version" comment line). Throws InputError naming the file.
  static std::unique_ptr<Gpt2Bpe> load(const std::string& vocab_path, const std::string& merges_path);
  // Same from the files' contents; the names are used in error messages.
  static std::unique_ptr<Gpt2Bpe> parse(std::string_view vocab_json, std::string_view merges_text,
                                        const std::string& vocab_name, const std::string& merges_name);
  ~Gpt2Bpe() override;

  std::string name() const override { return "gpt2"; }
  int vocab_size() const override;
  int eot() const override;  // id of "<|endoftext|>", or -1 if the vocabulary has none
  // Thread-safe. Throws InputError(source, "invalid UTF-8 at byte offset N ...") for bad input.
  std::vector<int> encode(std::string_view text, const std::string& source = "text") const override;
  // Appends to `out` (lets callers reuse one buffer for a whole corpus).
  void encode_append(std::string_view text, std::vector<int>& out, const std::string& source = "text") const;
  // Raw bytes of the tokens (may be invalid UTF-8 when `ids` cuts a character). Throws
  // InputError("tokens", ...) for an id outside the vocabulary.
  std::string decode(const std::vector<int>& ids) const override;

  // For tests and benchmarks: the pre-tokenisation pieces of `text`, and the BPE of one piece's
  // bytes by the short-word (quadratic) or the long-word (heap) algorithm, without the cache.
  std::vector<std::string_view> pretokenize(std::string_view text, const std::string& source = "text") const;
  std::vector<int> bpe_piece(std::string_view bytes, bool use_heap) const;

  struct Impl;

 private:
  explicit Gpt2Bpe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpt2
