#pragma once
// Translation pairs, the seed course's workload: a pairs file (a TSV of source<TAB>target per line,
// or two line-aligned files), an example's tokens (source, separator, target, end of text) with its
// loss mask (the target and the end count), and a target decoded from a source (greedy, with the
// KV cache) for BLEU.
//
// The separator is the tokenizer's one token for "\t" and the end its end-of-text token, or the one
// token for "\n" where it has none (the byte tokenizer: a TSV line's own tab and newline). `gpt2
// prepare --pairs`, `gpt2 eval --bleu` and the trainer's BLEU all take them from here.
#include <string>
#include <vector>

#include "plugins/tokenizer.hpp"

namespace gpt2 {

template <class T>
class Stage;

struct PairTokens {
  int separator = -1, end = -1;
};
// InputError naming `source` when the tokenizer has no single token for them.
PairTokens pair_tokens(const Tokenizer& tok, const std::string& source = "--tokenizer");

struct Pair {
  std::string source, target;
  int line = 0;  // 1-based, in the pairs file (both files' line with two files)
};
struct PairsRead {
  std::vector<Pair> pairs;
  int skipped = 0;  // lines with an empty source or target (blank lines are not counted)
};
// A TSV (the first tab splits a line; a line without one is an InputError naming file and line), or
// two files of as many lines. "\r\n" line ends are read as "\n".
PairsRead read_pairs(const std::string& tsv);
PairsRead read_pairs(const std::string& sources, const std::string& targets);

// An example's tokens and, when mask is given, its loss mask (1 on the target and the end).
std::vector<int> encode_example(const Tokenizer& tok, const PairTokens& pt, const Pair& p, std::vector<uint8_t>* mask);
// What decoding starts from: the source and the separator.
std::vector<int> encode_prompt(const Tokenizer& tok, const PairTokens& pt, const std::string& source);

struct TranslateOptions {
  int max_tokens = 64;   // at most this many target tokens (the end token stops sooner)
  int context = 0;       // the model's window for the source and target (0: block_size)
};
// Greedy translations of each pair's source (the KV cache; decoding stops at the end token).
// `stage` holds the whole model.
std::vector<std::string> translate(Stage<float>& stage, const Tokenizer& tok, const PairTokens& pt,
                                   const std::vector<Pair>& pairs, const TranslateOptions& o);

}  // namespace gpt2
