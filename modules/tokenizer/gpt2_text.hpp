#pragma once
// The text side of GPT-2's byte-level BPE (gpt2_bpe.cpp does the vocabulary and the merges): the
// byte <-> unicode map of its token strings, strict UTF-8, and the pre-tokeniser that splits text
// into pieces exactly as GPT-2's regex does (see gpt2_bpe.hpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpt2::bpe_text {

// GPT-2's byte <-> unicode map: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so that every token is a printable string.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int, 324> to_byte{};  // code point -> byte, -1 where none (all mapped cps are < 324)
  ByteMap();
};
const ByteMap& byte_map();

// UTF-8 (strict: no overlongs, no surrogates, nothing above U+10FFFF).
// Returns the sequence length (1..4) and sets cp, or 0 when s[0..avail) does not start with a valid
// sequence.
int decode_utf8(const unsigned char* s, size_t avail, uint32_t& cp);
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's pre-tokenisation regex as a hand-written matcher over code points.
class Pretokenizer {
 public:
  Pretokenizer();
  // Returns the end of the piece starting at s[i] (i < n). Validates the UTF-8 it reads: throws
  // InputError(source, "invalid UTF-8 at byte offset N ...").
  size_t next_piece(const unsigned char* s, size_t n, size_t i, const std::string& source) const;

 private:
  const uint8_t* bmp_;  // character class of every BMP code point
};

}  // namespace gpt2::bpe_text
