#pragma once
// Corpus BLEU as sacreBLEU (2.x) computes it, so that scores compare with published ones:
// - tokenization `13a` (mteval-v13a: punctuation and symbols split off, periods and commas unless
//   beside digits, a dash after a digit; the default) or `none` (whitespace only); optional
//   lowercasing (ASCII letters);
// - per segment: n-grams 1..max_order clipped by the largest count in any reference, the hypothesis
//   length, and the closest reference length (the shorter on a tie); summed over the corpus;
// - brevity penalty exp(1 - r/c) when c < r; precisions smoothed by `exp` (the default: NIST's
//   geometric halving), `floor` (zero counts become smooth_value, 0.1 by default), `add-k` (k added
//   to counts and totals of orders >= 2, 1 by default) or `none`;
// - score = 100 * bp * exp(mean log precision); 0 when no unigram matches. effective_order (sentence
//   BLEU) averages only the orders the hypothesis has n-grams of.
// chrF and the other tokenizers (intl, char, zh, ja-mecab, spm) are not implemented.
#include <string>
#include <vector>

#include "core/choice.hpp"

namespace gpt2 {

enum class BleuTokenize { mteval_13a, none };
template <>
struct Words<BleuTokenize> {
  static inline const WordList list{"13a", "none"};
};
enum class BleuSmooth { exp, floor, add_k, none };
template <>
struct Words<BleuSmooth> {
  static inline const WordList list{"exp", "floor", "add-k", "none"};
};

struct BleuOptions {
  BleuTokenize tokenize = BleuTokenize::mteval_13a;
  bool lowercase = false;
  BleuSmooth smooth = BleuSmooth::exp;
  double smooth_value = -1;      // < 0: the method's default (floor 0.1, add-k 1)
  int max_order = 4;
  bool effective_order = false;
};

struct BleuScore {
  double score = 0;               // 0..100
  double bp = 0;                  // brevity penalty
  std::vector<double> counts, totals, precisions;  // per order (counts and totals after add-k)
  long long sys_len = 0, ref_len = 0;
  std::string describe() const;   // "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
};

// The sufficient statistics of one segment, or a corpus (summed): lengths and per-order n-gram
// matches and totals.
struct BleuStats {
  long long sys_len = 0, ref_len = 0;
  std::vector<long long> correct, total;
};

std::string tokenize_13a(const std::string& line);
// One segment against its references (already preprocessed: lowercased and tokenized).
BleuStats bleu_segment_stats(const std::string& hyp, const std::vector<std::string>& refs, int max_order);
// The score from (corpus) statistics, sacreBLEU's compute_bleu.
BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& o);
// refs: reference streams, each one string per hypothesis (sacreBLEU's corpus_score argument order).
// InputError when a stream's length differs from the hypotheses' or an option is unknown.
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& o = {});
// One hypothesis against its references, with effective order (sacreBLEU's sentence_score).
BleuScore sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs, BleuOptions o = {});

}  // namespace gpt2
