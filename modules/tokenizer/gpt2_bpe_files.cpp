// The GPT-2 vocabulary files read and checked (gpt2_bpe_files.hpp), and where a downloaded copy is cached.
#include "modules/tokenizer/gpt2_bpe_files.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "modules/tokenizer/flat_json.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"
#include "modules/tokenizer/gpt2_text.hpp"

namespace gpt2 {

namespace {
using bpe_text::append_utf8;
using bpe_text::byte_map;
using bpe_text::ByteMap;
using bpe_text::decode_utf8;

// GPT-2 token string (code points of the byte<->unicode map) -> raw bytes; false if a code point
// is outside the map.
bool token_bytes(const std::vector<uint32_t>& cps, std::string& out) {
  const ByteMap& bm = byte_map();
  out.clear();
  for (uint32_t cp : cps) {
    if (cp >= bm.to_byte.size() || bm.to_byte[cp] < 0) return false;
    out += static_cast<char>(bm.to_byte[cp]);
  }
  return true;
}

std::string printable(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t cp : cps) append_utf8(s, cp);
  return s;
}

// The tokens of one merge line, split on ASCII whitespace (tokens never contain it: the byte map
// moves it to U+0100..): the first two as bytes into `part`; returns how many there are. (`cps`:
// scratch.)
int merge_line_tokens(std::string_view line, size_t line_no, const std::string& merges_name,
                      std::vector<uint32_t>& cps, std::string part[2]) {
  int nparts = 0;
  for (size_t k = 0; k < line.size();) {
    while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
    if (k >= line.size()) break;
    size_t e = k;
    while (e < line.size() && line[e] != ' ' && line[e] != '\t') ++e;
    if (nparts < 2) {
      cps.clear();
      for (size_t c = k; c < e;) {
        uint32_t cp;
        const int l = decode_utf8(reinterpret_cast<const unsigned char*>(line.data()) + c, e - c, cp);
        if (l == 0) fail_input(merges_name, "line ", line_no, ": invalid UTF-8");
        cps.push_back(cp);
        c += static_cast<size_t>(l);
      }
      if (!token_bytes(cps, part[nparts]))
        fail_input(merges_name, "line ", line_no, ": \"", printable(cps), "\" is not in GPT-2's byte alphabet");
    }
    ++nparts;
    k = e;
  }
  return nparts;
}
}  // namespace

std::string gpt2_vocab_cache_dir() {
  const char* cache = std::getenv("GPT2_CACHE");
  std::string base;
  if (cache && *cache) {
    base = cache;
  } else {
    const char* home = std::getenv("HOME");
    base = std::string(home && *home ? home : ".") + "/.cache/gpt2-kokkos";
  }
  return base + "/gpt2-vocab";
}

namespace bpe_files {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path, "cannot open the GPT-2 ", what, " file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail_input(path, "error reading the GPT-2 ", what, " file");
  return ss.str();
}

Vocabulary read_vocabulary(std::string_view vocab_json, const std::string& vocab_name) {
  Vocabulary voc;
  TokenIds& ids = voc.ids;
  std::vector<std::pair<int, std::string>> entries;
  ids.reserve(1 << 17);
  FlatJsonReader(vocab_json, vocab_name).read_object([&](const std::vector<uint32_t>& cps, long long v) {
    std::string bytes;
    if (!token_bytes(cps, bytes)) {
      // Special tokens may use characters outside the byte alphabet; they are never produced by
      // merges, only by id.
      bytes = printable(cps);
    }
    if (v < 0 || v > 10'000'000)
      fail_input(vocab_name, "token id ", v, " of \"", printable(cps), "\" is out of range");
    if (!ids.emplace(bytes, static_cast<int>(v)).second)
      fail_input(vocab_name, "token \"", printable(cps), "\" appears twice");
    entries.emplace_back(static_cast<int>(v), std::move(bytes));
  });
  const int vocab_size = static_cast<int>(entries.size());
  voc.id_bytes.assign(vocab_size, std::string());
  std::vector<bool> seen(vocab_size, false);
  for (auto& [id, bytes] : entries) {
    if (id >= vocab_size) fail_input(vocab_name, "token ids must be 0..", vocab_size - 1, ", found ", id);
    if (seen[id]) fail_input(vocab_name, "token id ", id, " is used twice");
    seen[id] = true;
    voc.id_bytes[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(std::string(1, static_cast<char>(b)));
    if (it == ids.end())
      fail_input(vocab_name, "no token for byte ", b, " (not a GPT-2 byte-level vocabulary?)");
    voc.byte_id[b] = it->second;
  }
  if (const auto it = ids.find("<|endoftext|>"); it != ids.end()) voc.eot = it->second;
  return voc;
}

Merges read_merges(std::string_view merges_text, const TokenIds& ids, const std::string& merges_name,
                   const std::string& vocab_name) {
  Merges m;
  size_t pos = 0, line_no = 0;
  std::vector<uint32_t> cps;
  std::string part[2];
  while (pos < merges_text.size()) {
    size_t eol = merges_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = merges_text.size();
    std::string_view line = merges_text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && !line.empty() && line[0] == '#') continue;  // version comment
    const int nparts = merge_line_tokens(line, line_no, merges_name, cps, part);
    if (nparts == 0) continue;
    if (nparts != 2) fail_input(merges_name, "line ", line_no, ": expected two tokens \"A B\", got ", nparts);
    const auto ia = ids.find(part[0]), ib = ids.find(part[1]), im = ids.find(part[0] + part[1]);
    if (ia == ids.end() || ib == ids.end() || im == ids.end())
      fail_input(merges_name, "line ", line_no, ": merge \"", std::string(line),
                 "\" uses or makes a token missing from ", vocab_name);
    m.a.push_back(ia->second);
    m.b.push_back(ib->second);
    m.merged.push_back(im->second);
  }
  if (m.a.empty()) fail_input(merges_name, "no merges found (expected GPT-2's vocab.bpe)");
  return m;
}

}  // namespace bpe_files
}  // namespace gpt2
