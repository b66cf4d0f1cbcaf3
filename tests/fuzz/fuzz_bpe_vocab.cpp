// libFuzzer harness: the GPT-2 vocabulary parsers (Gpt2Bpe::parse: encoder.json's flat JSON object
// and vocab.bpe's merge list), which read the user's --vocab/--merges files. The input is the JSON,
// a NUL byte, then the merges. Accepted outcomes: InputError naming one of the two files; or a
// tokenizer that encodes and decodes a fixed text (and the input itself, when it is UTF-8) back to
// the same bytes, with every id inside its vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"

using namespace gpt2;

namespace {
void round_trip(const Gpt2Bpe& t, const std::string& text) {
  std::vector<int> ids;
  try {
    ids = t.encode(text);
  } catch (const InputError&) {
    return;  // not UTF-8 (fuzz_tokenizer checks that this is exactly when)
  }
  for (int id : ids)
    if (id < 0 || id >= t.vocab_size()) fuzz::finding("id ", id, " outside the vocabulary (", t.vocab_size(), ")");
  if (t.decode(ids) != text) fuzz::finding("decode(encode(x)) != x");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json = input.substr(0, nul);
  const std::string merges = nul == std::string::npos ? std::string() : input.substr(nul + 1);
  fuzz::expect_only_input_errors("Gpt2Bpe::parse", [&] {
    const auto t = Gpt2Bpe::parse(json, merges, "encoder.json", "vocab.bpe");
    round_trip(*t, "Hello world, it's a caf\xc3\xa9 in 2024!\n\n  aaaa bbbb \xf0\x9f\x98\x80");
    round_trip(*t, merges);
    if (t->eot() >= t->vocab_size()) fuzz::finding("eot id ", t->eot(), " outside the vocabulary");
  });
  return 0;
}
