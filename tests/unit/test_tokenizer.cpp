// Tokenizers: the byte tokenizer, GPT-2's byte-level BPE on a small synthetic vocabulary (always
// runs), and on GPT-2's real vocabulary compared with the JavaScript reference encoder (runs when
// job_scripts/fetch_gpt2_vocab.sh has filled the cache; skipped with the reason otherwise).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "modules/tokenizer/byte_tokenizer.hpp"
#include "modules/tokenizer/flat_json.hpp"
#include "modules/tokenizer/gpt2_bpe.hpp"
#include "plugins/tokenizer.hpp"

using namespace gpt2;
namespace fs = std::filesystem;

namespace {

// The repository root, found from this file's path (CMake compiles it by absolute path).
fs::path repo_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }
fs::path lines_file() { return repo_root() / "tests" / "data" / "tokenizer_lines.txt"; }
fs::path fixture_file() { return repo_root() / "tests" / "data" / "tokenizer_lines.gpt2.ids"; }
fs::path reference_script() { return repo_root() / "tests" / "reference" / "gpt2_encode.js"; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    lines.push_back(text.substr(pos, e - pos));
    pos = e + 1;
  }
  return lines;
}

// One JSON array of ints a line ("[1,2,3]") -> vectors.
std::vector<std::vector<int>> parse_id_lines(const std::string& text) {
  std::vector<std::vector<int>> out;
  for (const std::string& line : split_lines(text)) {
    std::vector<int> ids;
    for (size_t i = 0; i < line.size();) {
      if (line[i] >= '0' && line[i] <= '9') {
        size_t e = i;
        while (e < line.size() && line[e] >= '0' && line[e] <= '9') ++e;
        ids.push_back(std::stoi(line.substr(i, e - i)));
        i = e;
      } else {
        ++i;
      }
    }
    out.push_back(std::move(ids));
  }
  return out;
}

std::string show(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      had_ = true;
      old_ = old;
    }
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// ---- a synthetic GPT-2-format vocabulary --------------------------------------------------------
// GPT-2's byte -> code point map, written independently of the implementation.
uint32_t byte_cp(unsigned b) {
  static const std::vector<uint32_t> map = [] {
    std::vector<uint32_t> m(256);
    uint32_t n = 0;
    for (unsigned x = 0; x < 256; ++x) {
      const bool keep = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      m[x] = keep ? x : 256 + n++;
    }
    return m;
  }();
  return map[b];
}
void put_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}
std::string mapped(const std::string& bytes) {  // raw bytes -> GPT-2 token string (UTF-8)
  std::string s;
  for (unsigned char b : bytes) put_utf8(s, byte_cp(b));
  return s;
}
std::string json_key(const std::string& bytes) {  // as \uXXXX escapes, except plain letters
  std::string s = "\"";
  char buf[8];
  for (unsigned char b : bytes) {
    const uint32_t cp = byte_cp(b);
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
      s += char(cp);
    } else if (cp == '"' || cp == '\\') {
      s += '\\';
      s += char(cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      s += buf;
    }
  }
  return s + "\"";
}

struct Synthetic {
  std::string vocab_json, merges;
  int vocab_size = 0;
};

// 256 byte tokens, then the merges (rank order), then "<|endoftext|>" and a special token with an
// astral character (as a surrogate pair escape).
Synthetic synthetic_vocab(const std::vector<std::pair<std::string, std::string>>& merges) {
  Synthetic s;
  std::string j = "{";
  int id = 0;
  for (unsigned b = 0; b < 256; ++b)
    j += (b ? ", " : "") + json_key(std::string(1, char(b))) + ": " + std::to_string(id++);
  s.merges = "#version: 0.2\n";
  for (const auto& [a, b] : merges) {
    j += ",\n " + json_key(a + b) + ": " + std::to_string(id++);
    s.merges += mapped(a) + " " + mapped(b) + "\n";
  }
  j += ", \"<|endoftext|>\": " + std::to_string(id++);
  j += ", \"<|\\ud83d\\ude00|>\": " + std::to_string(id++) + "}\n";
  s.vocab_json = j;
  s.vocab_size = id;
  return s;
}

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"b", "c"},          {"a", "b"}, {"a", "a"},   {"aa", "aa"},  {" ", "t"},   {"h", "e"},
    {" t", "he"},        {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"'", "s"},   {"\xc3", "\xa9"},
    {"caf", "\xc3\xa9"}, {"c", "a"}, {"ca", "f"},  {" ", " "},    {"  ", "  "}, {"\n", "\n"},
};

std::unique_ptr<Gpt2Bpe> synthetic_bpe() {
  const Synthetic s = synthetic_vocab(kMerges);
  return Gpt2Bpe::parse(s.vocab_json, s.merges, "synthetic/encoder.json", "synthetic/vocab.bpe");
}

std::vector<std::string> pieces(const Gpt2Bpe& t, const std::string& text) {
  std::vector<std::string> out;
  for (auto p : t.pretokenize(text)) out.emplace_back(p);
  return out;
}

std::string random_text(std::mt19937& rng, size_t n_atoms) {
  static const std::vector<std::string> atoms = {"a",
                                                 "b",
                                                 "c",
                                                 "ab",
                                                 "abc",
                                                 "aaaa",
                                                 "hello",
                                                 "the",
                                                 " ",
                                                 "  ",
                                                 "\t",
                                                 "\n",
                                                 "'s",
                                                 "'t",
                                                 "'re",
                                                 "'",
                                                 "0",
                                                 "42",
                                                 ".",
                                                 ",",
                                                 "!?",
                                                 "caf\xc3\xa9",
                                                 "\xd0\xb6",
                                                 "\xe4\xb8\xad",
                                                 "\xf0\x9f\x98\x80",
                                                 "\xc2\xa0",
                                                 "\xe3\x80\x80",
                                                 "x",
                                                 "Z",
                                                 "--",
                                                 "<|endoftext|>"};
  std::string s;
  for (size_t k = 0; k < n_atoms; ++k) s += atoms[rng() % atoms.size()];
  return s;
}

}  // namespace

// ==== byte tokenizer =============================================================================
TEST(ByteTokenizer, RoundTripsEveryByte) {
  auto t = make_tokenizer("byte");
  EXPECT_EQ(t->name(), "byte");
  EXPECT_EQ(t->vocab_size(), 256);
  EXPECT_EQ(t->eot(), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  all += "Hello, world! caf\xc3\xa9 \xff\xfe invalid UTF-8 is fine here";
  const auto ids = t->encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(all[i]));
  EXPECT_EQ(t->decode(ids), all);
  EXPECT_TRUE(t->encode("").empty());
  EXPECT_THROW(t->decode({65, 256}), InputError);
  EXPECT_THROW(t->decode({-1}), InputError);
}

TEST(MakeTokenizer, UnknownNameIsAnInputError) {
  try {
    make_tokenizer("sentencepiece");
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(e.input(), "tokenizer");
    EXPECT_NE(std::string(e.what()).find("expected byte or gpt2, got sentencepiece"), std::string::npos)
        << e.what();
  }
}

TEST(MakeTokenizer, MissingGpt2CacheSaysHowToFetch) {
  const fs::path empty = fs::temp_directory_path() / ("gpt2_tok_test_empty_" + std::to_string(::getpid()));
  fs::create_directories(empty);
  ScopedEnv env("GPT2_CACHE", empty.string());
  EXPECT_EQ(gpt2_vocab_cache_dir(), (empty / "gpt2-vocab").string());
  try {
    make_tokenizer("gpt2");
    FAIL() << "no exception";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fetch_gpt2_vocab.sh"), std::string::npos) << what;
    EXPECT_NE(what.find("--vocab"), std::string::npos) << what;
    EXPECT_NE(what.find("encoder.json"), std::string::npos) << what;
  }
  // Explicit files that do not exist name the file.
  try {
    make_tokenizer("gpt2", {(empty / "nope.json").string(), (empty / "nope.bpe").string()});
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_EQ(e.input(), (empty / "nope.json").string());
  }
  fs::remove_all(empty);
}

// ==== GPT-2 BPE on a synthetic vocabulary (no downloads needed) ===================================
// encoder.json's reader: every one-letter escape, a \u escape, a surrogate pair; a bad escape is an
// InputError naming the file.
TEST(FlatJson, ReadsEveryEscape) {
  const std::string name = "enc.json";
  std::vector<std::vector<uint32_t>> keys;
  std::vector<long long> values;
  FlatJsonReader(R"({"\"\\\/\b\f\n\r\t": 5, "\u0120\ud83d\ude00": 7})", name)
      .read_object([&](const std::vector<uint32_t>& k, long long v) { keys.push_back(k), values.push_back(v); });
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], (std::vector<uint32_t>{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'}));
  EXPECT_EQ(keys[1], (std::vector<uint32_t>{0x120, 0x1F600}));
  EXPECT_EQ(values, (std::vector<long long>{5, 7}));
  for (const char* bad : {R"({"\x": 1})", R"({"\ude00": 1})", "{\"\\"})
    try {
      FlatJsonReader(bad, name).read_object([](const std::vector<uint32_t>&, long long) {});
      ADD_FAILURE() << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("enc.json"), std::string::npos) << e.what();
    }
}

TEST(Gpt2BpeSynthetic, LoadsVocabularyWithEscapes) {
  auto t = synthetic_bpe();
  EXPECT_EQ(t->name(), "gpt2");
  EXPECT_EQ(t->vocab_size(), 256 + static_cast<int>(kMerges.size()) + 2);
  EXPECT_EQ(t->eot(), 256 + static_cast<int>(kMerges.size()));
  // Every single byte is its own token, found through the byte<->unicode map.
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t->decode({b}), std::string(1, char(b)));
  EXPECT_EQ(t->decode({'"', '\\', 0x20}), std::string("\"\\ "));
  EXPECT_EQ(t->decode({t->eot()}), "<|endoftext|>");
  EXPECT_EQ(t->decode({t->vocab_size() - 1}), "<|\xf0\x9f\x98\x80|>");  // surrogate pair escape
}

TEST(Gpt2BpeSynthetic, SingleBytesMapToTheirTokens) {
  auto t = synthetic_bpe();
  for (int b = 0; b < 128; ++b) {  // ASCII: valid UTF-8 on its own
    const auto ids = t->encode(std::string(1, char(b)));
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(ids[0], b);
  }
}

TEST(Gpt2BpeSynthetic, PretokenizesLikeGpt2Regex) {
  auto t = synthetic_bpe();
  using V = std::vector<std::string>;
  // Expected splits checked against the JavaScript regex of the reference encoder.
  EXPECT_EQ(pieces(*t, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces(*t, "I'm   here\t\n x"), (V{"I", "'m", "  ", " here", "\t\n", " x"}));
  EXPECT_EQ(pieces(*t, "don't"), (V{"don", "'t"}));
  EXPECT_EQ(pieces(*t, "DON'T"), (V{"DON", "'", "T"}));  // contractions are case-sensitive
  EXPECT_EQ(pieces(*t, "we'll've'd"), (V{"we", "'ll", "'ve", "'d"}));
  EXPECT_EQ(pieces(*t, "''s"), (V{"''", "s"}));
  EXPECT_EQ(pieces(*t, " 'sup"), (V{" '", "sup"}));
  EXPECT_EQ(pieces(*t, "abc   "), (V{"abc", "   "}));  // trailing whitespace stays one piece
  EXPECT_EQ(pieces(*t, " \n"), (V{" \n"}));
  EXPECT_EQ(pieces(*t, "\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(pieces(*t, "a  \t b"), (V{"a", "  \t", " b"}));
  EXPECT_EQ(pieces(*t, "3.14"), (V{"3", ".", "14"}));
  EXPECT_EQ(pieces(*t, " 123abc"), (V{" 123", "abc"}));
  EXPECT_EQ(pieces(*t, "?!... ok"), (V{"?!...", " ok"}));
  EXPECT_EQ(pieces(*t, "hi \xf0\x9f\x98\x80\xf0\x9f\x98\x80!"),
            (V{"hi", " \xf0\x9f\x98\x80\xf0\x9f\x98\x80!"}));
  EXPECT_EQ(pieces(*t, "\xe4\xb8\xad\xe6\x96\x87 \xe5\xad\x97"),
            (V{"\xe4\xb8\xad\xe6\x96\x87", " \xe5\xad\x97"}));
  EXPECT_EQ(pieces(*t, "caf\xc3\xa9 \xe2\x85\xab"), (V{"caf\xc3\xa9", " \xe2\x85\xab"}));  // U+216B is \p{N}
  EXPECT_EQ(pieces(*t, "\xd9\xa3\xd9\xa4 \xc2\xb2x"), (V{"\xd9\xa3\xd9\xa4", " \xc2\xb2", "x"}));
  // JavaScript's \s: NBSP, U+3000 and U+FEFF are whitespace; U+0085 is not.
  EXPECT_EQ(pieces(*t,
                   "a\xc2\xa0"
                   "b"),
            (V{"a", "\xc2\xa0", "b"}));
  EXPECT_EQ(pieces(*t, "x\xe3\x80\x80\xe3\x80\x80y"), (V{"x", "\xe3\x80\x80", "\xe3\x80\x80", "y"}));
  EXPECT_EQ(pieces(*t,
                   "\xef\xbb\xbf"
                   "BOM"),
            (V{"\xef\xbb\xbf", "BOM"}));
  EXPECT_EQ(pieces(*t,
                   "a\xc2\x85"
                   "b"),
            (V{"a", "\xc2\x85", "b"}));
  EXPECT_EQ(pieces(*t, ""), V{});
}

TEST(Gpt2BpeSynthetic, MergesByRankNotLeftToRight) {
  auto t = synthetic_bpe();
  auto id = [&](const std::string& s) {  // id of a merged token = 256 + its merge rank
    for (size_t r = 0; r < kMerges.size(); ++r)
      if (kMerges[r].first + kMerges[r].second == s) return 256 + static_cast<int>(r);
    return static_cast<int>(static_cast<unsigned char>(s[0]));
  };
  EXPECT_EQ(t->encode("abc"), (std::vector<int>{'a', id("bc")}));  // (b,c) ranks before (a,b)
  EXPECT_EQ(t->encode("ab"), (std::vector<int>{id("ab")}));
  EXPECT_EQ(t->encode("aaa"), (std::vector<int>{id("aa"), 'a'}));  // left to right, no overlap
  EXPECT_EQ(t->encode("aaaa"), (std::vector<int>{id("aaaa")}));
  EXPECT_EQ(t->encode("aaaaa"), (std::vector<int>{id("aaaa"), 'a'}));
  EXPECT_EQ(t->encode("hello the"), (std::vector<int>{id("hello"), id(" the")}));
  EXPECT_EQ(t->encode("it's"), (std::vector<int>{'i', 't', id("'s")}));
  EXPECT_EQ(t->encode("caf\xc3\xa9"), (std::vector<int>{id("caf\xc3\xa9")}));
  // 8 spaces + x: the run gives 7 spaces to its own piece and 1 to " x".
  EXPECT_EQ(t->encode("        x"), (std::vector<int>{id("    "), id("  "), ' ', ' ', 'x'}));
  // The result is the same on the second (cached) call.
  EXPECT_EQ(t->encode("abc abc abc"), t->encode("abc abc abc"));
}

TEST(Gpt2BpeSynthetic, HeapAlgorithmEqualsReferenceOnLongPieces) {
  auto t = synthetic_bpe();
  std::mt19937 rng(7);
  const std::string alphabet = "aabbcchello'stf ";
  for (int trial = 0; trial < 300; ++trial) {
    std::string w(1 + rng() % 300, 'a');
    for (char& c : w) c = alphabet[rng() % alphabet.size()];
    ASSERT_EQ(t->bpe_piece(w, true), t->bpe_piece(w, false)) << w;
  }
  // Through encode: long pieces (>= 64 bytes) take the heap path.
  const std::string longword(1000, 'a');
  EXPECT_EQ(t->encode(longword), std::vector<int>(250, 256 + 3));
}

TEST(Gpt2BpeSynthetic, InvalidUtf8IsAnInputErrorWithOffset) {
  auto t = synthetic_bpe();
  struct Case {
    std::string text;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {"abc\xff", 3},                   // byte never valid
      {"ok \x80 stray", 3},             // stray continuation byte
      {"x\xe2\x82", 1},                 // truncated 3-byte sequence at the end
      {"xy\xe2\x82z", 2},               // truncated in the middle
      {"ok \xc0\xaf", 3},               // overlong '/'
      {"\xe0\x80\xaf", 0},              // overlong 3-byte
      {"a b \xed\xa0\x80", 4},          // UTF-16 surrogate
      {"\xf4\x90\x80\x80", 0},          // above U+10FFFF
      {"caf\xc3\xa9 \xf0\x9f\x98", 6},  // truncated emoji after valid text
      {"'s\xc3", 2},
  };
  for (const auto& c : cases) {
    try {
      t->encode(c.text, "corpus.txt");
      ADD_FAILURE() << "no exception for offset " << c.offset;
    } catch (const InputError& e) {
      EXPECT_EQ(e.input(), "corpus.txt");
      const std::string want = "byte offset " + std::to_string(c.offset) + " ";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " (want " << want << ")";
    }
  }
}

TEST(Gpt2BpeSynthetic, MalformedFilesNameTheFile) {
  const Synthetic s = synthetic_vocab(kMerges);
  auto expect_error = [](const std::string& vocab, const std::string& merges, const std::string& file) {
    try {
      Gpt2Bpe::parse(vocab, merges, "enc.json", "merges.bpe");
      ADD_FAILURE() << "no exception, expected one naming " << file;
    } catch (const InputError& e) {
      EXPECT_EQ(e.input(), file) << e.what();
    }
  };
  expect_error("{\"a\": 1", s.merges, "enc.json");
  expect_error("[1, 2]", s.merges, "enc.json");
  expect_error("{\"a\": 0}", s.merges, "enc.json");                    // byte tokens missing
  expect_error(s.vocab_json, "#version: 0.2\nq z\n", "merges.bpe");    // merge result missing
  expect_error(s.vocab_json, "#version: 0.2\na b c\n", "merges.bpe");  // three tokens
  expect_error(s.vocab_json, "#version: 0.2\n", "merges.bpe");         // no merges
}

TEST(Gpt2BpeSynthetic, RoundTripAndNoEot) {
  auto t = synthetic_bpe();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string text = random_text(rng, rng() % 40);
    const auto ids = t->encode(text);
    EXPECT_EQ(t->decode(ids), text);
    for (int id : ids) ASSERT_NE(id, t->eot()) << text;
  }
}

// ==== GPT-2's real vocabulary ====================================================================
namespace {
std::string vocab_dir() { return gpt2_vocab_cache_dir(); }
bool have_vocab() {
  return fs::exists(fs::path(vocab_dir()) / "encoder.json") &&
         fs::exists(fs::path(vocab_dir()) / "vocab.bpe");
}
#define REQUIRE_GPT2_VOCAB()                                                                   \
  if (!have_vocab())                                                                           \
  GTEST_SKIP() << "GPT-2 vocabulary not found in " << vocab_dir()                              \
               << " (run job_scripts/fetch_gpt2_vocab.sh, or set GPT2_CACHE); skipping tests " \
                  "against GPT-2's real vocabulary"

const Tokenizer& gpt2_tok() {
  static std::unique_ptr<Tokenizer> t = make_tokenizer("gpt2");
  return *t;
}
}  // namespace

TEST(Gpt2BpeReal, VocabularyShape) {
  REQUIRE_GPT2_VOCAB();
  const auto& t = gpt2_tok();
  EXPECT_EQ(t.name(), "gpt2");
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.eot(), 50256);
  EXPECT_EQ(t.decode({50256}), "<|endoftext|>");
  // Well-known ids.
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int>{15496, 995}));
  EXPECT_EQ(t.encode(" the"), (std::vector<int>{262}));
  EXPECT_EQ(t.encode("\n"), (std::vector<int>{198}));
  EXPECT_TRUE(t.encode("").empty());
}

TEST(Gpt2BpeReal, MatchesCommittedReferenceIds) {
  REQUIRE_GPT2_VOCAB();
  const std::string text = slurp(lines_file());
  const auto lines = split_lines(text);
  const auto want = parse_id_lines(slurp(fixture_file()));
  ASSERT_EQ(want.size(), lines.size() + 1)
      << fixture_file() << " is stale: regenerate it with " << reference_script();
  const auto& t = gpt2_tok();
  int equal = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto got = t.encode(lines[i]);
    EXPECT_EQ(got, want[i]) << "line " << i + 1 << ": \"" << lines[i] << "\"\n ours " << show(got)
                            << "\n   js " << show(want[i]);
    equal += got == want[i];
  }
  EXPECT_EQ(t.encode(text), want.back()) << "whole file";
  std::cout << "[ compared ] " << equal << "/" << lines.size() << " lines and the whole file ("
            << want.back().size() << " tokens) equal to the JS reference\n";
}

TEST(Gpt2BpeReal, MatchesJsReferenceEncoderLive) {
  REQUIRE_GPT2_VOCAB();
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    GTEST_SKIP()
        << "node not found: cannot run the JS reference encoder (the committed ids are still compared)";
  if (!fs::exists(fs::path(vocab_dir()) / "Encoder.js"))
    GTEST_SKIP() << "Encoder.js not in " << vocab_dir()
                 << " (re-run job_scripts/fetch_gpt2_vocab.sh --force)";
  const std::string cmd =
      "node '" + reference_script().string() + "' '" + vocab_dir() + "' '" + lines_file().string() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  ASSERT_EQ(rc, 0) << cmd << "\n" << out;
  const std::string text = slurp(lines_file());
  const auto lines = split_lines(text);
  const auto want = parse_id_lines(out);
  ASSERT_EQ(want.size(), lines.size() + 1);
  const auto& t = gpt2_tok();
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(t.encode(lines[i]), want[i]) << "line " << i + 1 << ": \"" << lines[i] << "\"";
  EXPECT_EQ(t.encode(text), want.back()) << "whole file";
  // The committed fixture is what the script prints now.
  EXPECT_EQ(out, slurp(fixture_file()))
      << fixture_file() << " is stale: regenerate it with " << reference_script();
}

TEST(Gpt2BpeReal, DecodeInvertsEncodeAndNeverYieldsEot) {
  REQUIRE_GPT2_VOCAB();
  const auto& t = gpt2_tok();
  const std::string text = slurp(lines_file());
  std::vector<std::string> texts = split_lines(text);
  texts.push_back(text);
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) texts.push_back(random_text(rng, rng() % 60));
  for (const auto& s : texts) {
    const auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    for (int id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 50256) << "\"" << s << "\"";  // <|endoftext|> (and literal text of it) never yields 50256
    }
  }
  EXPECT_EQ(t.encode("<|endoftext|>"), (std::vector<int>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_THROW(t.decode({50257}), InputError);
  EXPECT_THROW(t.encode("caf\xc3", "f.txt"), InputError);
}

TEST(Gpt2BpeReal, HeapAlgorithmEqualsReference) {
  REQUIRE_GPT2_VOCAB();
  auto t = Gpt2Bpe::load(vocab_dir() + "/encoder.json", vocab_dir() + "/vocab.bpe");
  std::mt19937 rng(5);
  const std::vector<std::string> alphabets = {
      "etaoinshrdlu", "abcdefghijklmnopqrstuvwxyz", "-=*#._", " ", "\n", "01"};
  for (int trial = 0; trial < 200; ++trial) {
    const std::string& a = alphabets[trial % alphabets.size()];
    std::string w(2 + rng() % 400, ' ');
    for (char& c : w) c = a[rng() % a.size()];
    ASSERT_EQ(t->bpe_piece(w, true), t->bpe_piece(w, false)) << w;
  }
}

TEST(Gpt2BpeReal, ConcurrentEncodesAgree) {
  REQUIRE_GPT2_VOCAB();
  const auto& t = gpt2_tok();
  const std::string text = slurp(lines_file());
  const auto want = t.encode(text);
  std::vector<std::vector<int>> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 5; ++r) got[k] = t.encode(text);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}
