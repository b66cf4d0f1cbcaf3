// libFuzzer harness: GPT-2's byte-level BPE (modules/tokenizer/gpt2_bpe.hpp) on arbitrary bytes.
// Vocabulary: GPT-2's own from the cache job_scripts/fetch_gpt2_vocab.sh fills
// (${GPT2_CACHE:-~/.cache/gpt2-kokkos}/gpt2-vocab), else (or with GPT2_FUZZ_TOKENIZER=synthetic) a
// small synthetic byte-level one. Properties checked on every input:
//  - invalid UTF-8 (by an independent strict validator) is an InputError naming the offset of the
//    first bad sequence, and valid UTF-8 never is; no other exception;
//  - decode(encode(x)) == x; every id is inside the vocabulary; encoding twice (the second time
//    through the piece cache) gives the same ids;
//  - the pre-tokenisation pieces are non-empty and concatenate to x;
//  - the heap BPE (long pieces) equals the reference BPE on every piece.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"

using namespace gpt2;

namespace {

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF), written independently of
// the tokenizer's decoder. Returns the offset of the first invalid sequence, or npos.
size_t first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp, min;
    if (b < 0x80) { len = 1, cp = b, min = 0; }
    else if ((b & 0xE0) == 0xC0) { len = 2, cp = b & 0x1F, min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3, cp = b & 0x0F, min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4, cp = b & 0x07, min = 0x10000; }
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = cp << 6 | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// ---- a synthetic GPT-2-format vocabulary: 256 byte tokens, some merges, <|endoftext|> ----------
uint32_t byte_cp(unsigned b) {  // GPT-2's byte -> code point map
  uint32_t n = 0;
  for (unsigned x = 0; x < 256; ++x) {
    const bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    if (x == b) return keep ? x : 256 + n;
    if (!keep) ++n;
  }
  return 0;
}
std::string mapped(const std::string& bytes) {  // raw bytes -> token string, UTF-8
  std::string s;
  for (unsigned char b : bytes) {
    const uint32_t cp = byte_cp(b);
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  }
  return s;
}
std::string json_key(const std::string& bytes) {  // every character as a \u escape
  std::string s = "\"";
  char buf[8];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(byte_cp(b)));
    s += buf;
  }
  return s + "\"";
}
std::unique_ptr<Gpt2Bpe> synthetic() {
  // Every merge ranks after the merges that make its parts (as in GPT-2's vocab.bpe).
  const std::pair<const char*, const char*> merges[] = {
      {"h", "e"}, {"t", "h"}, {" ", "t"}, {" t", "he"}, {"i", "n"}, {" ", "a"}, {"e", "r"},
      {"o", "n"}, {"a", "n"}, {"r", "e"}, {"\xc3", "\xa9"}, {"c", "a"}, {"ca", "f"},
      {"caf", "\xc3\xa9"}, {" ", " "}, {"  ", "  "}, {"\n", "\n"}, {"'", "s"}, {"a", "a"},
      {"aa", "aa"}, {"aaaa", "aaaa"}, {"1", "2"}, {"12", "3"}};
  std::string json = "{", bpe = "#version: 0.2\n";
  int id = 0;
  for (unsigned b = 0; b < 256; ++b) json += (b ? ",\n" : "") + json_key(std::string(1, char(b))) + ": " + std::to_string(id++);
  for (const auto& [a, b] : merges) {
    json += ",\n" + json_key(std::string(a) + b) + ": " + std::to_string(id++);
    bpe += mapped(a) + " " + mapped(b) + "\n";
  }
  json += ",\n\"<|endoftext|>\": " + std::to_string(id++) + "}\n";
  return Gpt2Bpe::parse(json, bpe, "synthetic/encoder.json", "synthetic/vocab.bpe");
}

std::unique_ptr<Gpt2Bpe> make_tokenizer() {
  const char* mode = std::getenv("GPT2_FUZZ_TOKENIZER");
  const std::string dir = gpt2_vocab_cache_dir();
  if (!(mode && std::string(mode) == "synthetic")) {
    if (std::FILE* f = std::fopen((dir + "/encoder.json").c_str(), "rb")) {
      std::fclose(f);
      std::fprintf(stderr, "fuzz_tokenizer: GPT-2's vocabulary from %s\n", dir.c_str());
      return Gpt2Bpe::load(dir + "/encoder.json", dir + "/vocab.bpe");
    }
  }
  std::fprintf(stderr, "fuzz_tokenizer: synthetic vocabulary\n");
  return synthetic();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Gpt2Bpe> tok = make_tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t bad = first_invalid_utf8(text);
  std::vector<int> ids;
  try {
    ids = tok->encode(text);
  } catch (const InputError& e) {
    if (bad == std::string::npos) fuzz::finding("InputError on valid UTF-8: ", e.what());
    const std::string expect = "invalid UTF-8 at byte offset " + std::to_string(bad) + " ";
    if (std::string(e.what()).find(expect) == std::string::npos)
      fuzz::finding("expected \"", expect, "\", got: ", e.what());
    return 0;
  } catch (const std::exception& e) {
    fuzz::finding("encode threw ", typeid(e).name(), ": ", e.what());
  }
  if (bad != std::string::npos) fuzz::finding("encode accepted invalid UTF-8 at byte offset ", bad);
  const int nv = tok->vocab_size();
  for (int id : ids)
    if (id < 0 || id >= nv) fuzz::finding("id ", id, " outside the vocabulary (", nv, ")");
  if (tok->decode(ids) != text) fuzz::finding("decode(encode(x)) != x");
  if (tok->encode(text) != ids) fuzz::finding("encoding again (from the cache) gave other ids");
  std::string joined;
  for (std::string_view piece : tok->pretokenize(text)) {
    if (piece.empty()) fuzz::finding("empty pre-tokenisation piece");
    joined += piece;
    if (piece.size() >= 2 && piece.size() <= 1024 && tok->bpe_piece(piece, false) != tok->bpe_piece(piece, true))
      fuzz::finding("heap BPE differs from the reference BPE on a piece of ", piece.size(), " bytes");
  }
  if (joined != text) fuzz::finding("the pre-tokenisation pieces do not concatenate to the input");
  return 0;
}
