#include "modules/tokenizer/flat_json.hpp"

#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "modules/tokenizer/gpt2_text.hpp"

namespace gpt2 {

using bpe_text::decode_utf8;

void FlatJsonReader::error(const char* what) const {
  fail_input(name_, "malformed JSON at byte offset ", i_, ": ", what);
}

void FlatJsonReader::expect(char c) {
  if (get() != c) {
    --i_;
    error((std::string("expected '") + c + "'").c_str());
  }
}

void FlatJsonReader::ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
}

uint32_t FlatJsonReader::hex4() {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = get();
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= static_cast<uint32_t>(c - 'A' + 10);
    else
      error("bad \\u escape");
  }
  return v;
}

void FlatJsonReader::read_string(std::vector<uint32_t>& cps) {
  cps.clear();
  expect('"');
  while (true) {
    const unsigned char c = static_cast<unsigned char>(get());
    if (c == '"') return;
    if (c < 0x20) error("control character in string");
    if (c == '\\') {
      const char e = get();
      // The one-letter escapes, each to the character in the same place in kTo.
      static const char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
      if (const char* p = e ? std::strchr(kFrom, e) : nullptr) {
        cps.push_back(static_cast<unsigned char>(kTo[p - kFrom]));
      } else if (e == 'u') {
        uint32_t u = hex4();
        if (u >= 0xD800 && u <= 0xDBFF) {  // high surrogate: a low one must follow
          if (get() != '\\' || get() != 'u') error("unpaired surrogate in \\u escape");
          const uint32_t lo = hex4();
          if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate in \\u escape");
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        } else if (u >= 0xDC00 && u <= 0xDFFF) {
          error("unpaired surrogate in \\u escape");
        }
        cps.push_back(u);
      } else {
        error("unknown escape");
      }
    } else {
      uint32_t cp;
      const int len =
          decode_utf8(reinterpret_cast<const unsigned char*>(s_.data()) + i_ - 1, s_.size() - i_ + 1, cp);
      if (len == 0) {
        --i_;
        error("invalid UTF-8");
      }
      i_ += len - 1;
      cps.push_back(cp);
    }
  }
}

long long FlatJsonReader::read_int() {
  const size_t start = i_;
  if (peek() == '-') ++i_;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
  if (i_ == start || (i_ == start + 1 && s_[start] == '-')) error("expected an integer token id");
  if (i_ - start > 12) error("token id too large");
  return std::strtoll(std::string(s_.substr(start, i_ - start)).c_str(), nullptr, 10);
}

}  // namespace gpt2
