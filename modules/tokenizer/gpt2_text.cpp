#include "modules/tokenizer/gpt2_text.hpp"

#include "core/error.hpp"
#include "modules/tokenizer/unicode_tables.hpp"

namespace gpt2::bpe_text {

ByteMap::ByteMap() {
  to_byte.fill(-1);
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
    to_byte[to_cp[b]] = b;
  }
}
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

int decode_utf8(const unsigned char* s, size_t avail, uint32_t& cp) {
  const unsigned b0 = s[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  auto cont = [](unsigned b) { return (b & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail < 2 || !cont(s[1])) return 0;
    cp = ((b0 & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3) return 0;
    const unsigned b1 = s[1];
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (b1 < lo || b1 > hi || !cont(s[2])) return 0;
    cp = ((b0 & 0x0Fu) << 12) | ((b1 & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4) return 0;
    const unsigned b1 = s[1];
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (b1 < lo || b1 > hi || !cont(s[2]) || !cont(s[3])) return 0;
    cp = ((b0 & 0x07u) << 18) | ((b1 & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
  }
  return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

[[noreturn]] void fail_utf8(const std::string& source, const unsigned char* s, size_t n, size_t off) {
  static const char* hex = "0123456789abcdef";
  std::string bytes;
  for (size_t k = off; k < n && k < off + 4; ++k) {
    if (!bytes.empty()) bytes += ' ';
    bytes += "0x";
    bytes += hex[s[k] >> 4];
    bytes += hex[s[k] & 15];
  }
  fail_input(source, "invalid UTF-8 at byte offset ", off, " (bytes ", bytes,
             "); GPT-2 BPE needs UTF-8 text");
}

// ---------------------------------------------------------------------------------------------
// Character classes of the pre-tokenisation regex.
enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// JavaScript's \s: WhiteSpace and LineTerminator of ECMA-262 (Zs of Unicode, plus TAB VT FF SP
// NBSP ZWNBSP and LF CR LS PS). U+0085 (NEL) and U+001C..U+001F are NOT in it, although Python's
// re module (str.isspace) counts them as whitespace.
bool js_space(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool in_ranges(const unicode::CodePointRange* r, size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (r[mid].hi < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && r[lo].lo <= cp;
}

Cls classify_slow(uint32_t cp) {
  if (js_space(cp)) return kSpace;
  if (in_ranges(unicode::kLetterRanges, unicode::kLetterRangesCount, cp)) return kLetter;
  if (in_ranges(unicode::kNumberRanges, unicode::kNumberRangesCount, cp)) return kNumber;
  return kOther;
}

// Class of every BMP code point (64 KiB, built once); astral code points use the range tables.
const std::array<uint8_t, 0x10000>& bmp_classes() {
  static const auto table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = classify_slow(cp);
    return t;
  }();
  return table;
}

inline Cls classify(uint32_t cp, const uint8_t* bmp) {
  return cp < 0x10000 ? static_cast<Cls>(bmp[cp]) : classify_slow(cp);
}

}  // namespace

Pretokenizer::Pretokenizer() : bmp_(bmp_classes().data()) {}

size_t Pretokenizer::next_piece(const unsigned char* s, size_t n, size_t i, const std::string& source) const {
  auto cls_at = [&](size_t k, size_t& len) -> Cls {
    const unsigned char b = s[k];
    if (b < 0x80) {
      len = 1;
      return static_cast<Cls>(bmp_[b]);
    }
    uint32_t cp;
    const int l = decode_utf8(s + k, n - k, cp);
    if (l == 0) fail_utf8(source, s, n, k);
    len = static_cast<size_t>(l);
    return classify(cp, bmp_);
  };
  auto run = [&](Cls c, size_t k) {  // end of the maximal run of class c starting at k
    size_t len;
    while (k < n && cls_at(k, len) == c) k += len;
    return k;
  };

  const unsigned char c0 = s[i];
  // 's|'t|'re|'ve|'m|'ll|'d  (ASCII, case-sensitive, no boundary check)
  if (c0 == '\'' && i + 1 < n) {
    const unsigned char c1 = s[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < n) {
      const unsigned char c2 = s[i + 2];
      if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
  }
  size_t len0;
  const Cls k0 = cls_at(i, len0);
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+' with the optional (U+0020) space
  if (c0 == ' ' && i + 1 < n) {
    size_t len1;
    const Cls k1 = cls_at(i + 1, len1);
    if (k1 != kSpace) return run(k1, i + 1 + len1);
  }
  if (k0 != kSpace) return run(k0, i + len0);
  // '\s+(?!\S)|\s+': the whitespace run, less its last character when a non-space follows
  // (unless that would leave nothing).
  size_t j = i, last = i, len;
  while (j < n && cls_at(j, len) == kSpace) {
    last = j;
    j += len;
  }
  if (j == n || last == i) return j;
  return last;
}

}  // namespace gpt2::bpe_text
