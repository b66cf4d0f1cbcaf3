#include "modules/tokenizer/byte_tokenizer.hpp"

#include "core/error.hpp"

namespace gpt2 {

std::vector<int> ByteTokenizer::encode(std::string_view text, const std::string& /*source*/) const {
  std::vector<int> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int>& ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255)
      fail_input("tokens", "byte tokenizer id ", ids[i], " at position ", i, " is outside 0..255");
    out[i] = static_cast<char>(ids[i]);
  }
  return out;
}

namespace {
[[maybe_unused]] const bool registered = TokenizerRegistry::add(
    {"byte", "one id per byte (0-255)", 0, 256,
     [](const TokenizerFiles&) -> std::unique_ptr<Tokenizer> { return std::make_unique<ByteTokenizer>(); }});
}  // namespace

}  // namespace gpt2
