#pragma once
// GPT-2's vocabulary files (encoder.json, vocab.bpe) read and checked for the BPE encoder
// (gpt2_bpe.cpp): every bad entry or line is one message naming the file. Internal to the tokenizer.
#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt2::bpe_files {

using TokenIds = std::unordered_map<std::string, int>;  // a token's raw bytes -> its id

// encoder.json: each id's raw bytes, each byte's single-byte token, <|endoftext|>'s id (-1 if
// absent) and the ids by token bytes.
struct Vocabulary {
  std::vector<std::string> id_bytes;
  std::array<int, 256> byte_id{};
  int eot = -1;
  TokenIds ids;
};
Vocabulary read_vocabulary(std::string_view vocab_json, const std::string& vocab_name);

// vocab.bpe: "#version: ..." then one "A B" merge a line; the line index is the rank. By rank: the
// ids of the pair (a, b) and of the token it makes.
struct Merges {
  std::vector<int> a, b, merged;
};
Merges read_merges(std::string_view merges_text, const TokenIds& ids, const std::string& merges_name,
                   const std::string& vocab_name);

std::string read_file(const std::string& path, const char* what);  // the whole file; fails naming it

}  // namespace gpt2::bpe_files
