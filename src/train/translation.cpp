#include "train/translation.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/rng.hpp"
#include "model/kv_decoder.hpp"
#include "train/sampler.hpp"

namespace gpt2 {

namespace {
int single_token(const Tokenizer& tok, const std::string& text, const char* what, const std::string& source) {
  const std::vector<int> ids = tok.encode(text, source);
  if (ids.size() != 1)
    fail_input(source, "the ", tok.name(), " tokenizer has no single token for ", what, " (", ids.size(),
               " tokens): it cannot separate translation pairs");
  return ids[0];
}

// The file's lines without their ends ("\n" or "\r\n"); a last line without an end counts.
std::vector<std::string> lines_of(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    out.emplace_back(text, begin, stop - begin);
    begin = end + 1;
  }
  return out;
}

void keep(PairsRead& r, std::string source, std::string target, int line) {
  if (source.empty() && target.empty()) return;  // a blank line
  if (source.empty() || target.empty()) {
    ++r.skipped;
    return;
  }
  r.pairs.push_back({std::move(source), std::move(target), line});
}
}  // namespace

PairTokens pair_tokens(const Tokenizer& tok, const std::string& source) {
  PairTokens p;
  p.separator = single_token(tok, "\t", "a tab (the separator)", source);
  p.end = tok.eot() >= 0 ? tok.eot() : single_token(tok, "\n", "a newline (the end of an example)", source);
  return p;
}

PairsRead read_pairs(const std::string& tsv) {
  PairsRead r;
  const std::vector<std::string> lines = lines_of(tsv);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) continue;
    const size_t tab = l.find('\t');
    if (tab == std::string::npos)
      fail_input(tsv, "line ", i + 1, " has no tab: expected source<TAB>target (or give two aligned files)");
    keep(r, l.substr(0, tab), l.substr(tab + 1), int(i + 1));
  }
  return r;
}

PairsRead read_pairs(const std::string& sources, const std::string& targets) {
  const std::vector<std::string> s = lines_of(sources), t = lines_of(targets);
  if (s.size() != t.size())
    fail_input(targets, "has ", t.size(), " lines but ", sources, " has ", s.size(), ": the files must be aligned");
  PairsRead r;
  for (size_t i = 0; i < s.size(); ++i) keep(r, s[i], t[i], int(i + 1));
  return r;
}

std::vector<int> encode_example(const Tokenizer& tok, const PairTokens& pt, const Pair& p, std::vector<uint8_t>* mask) {
  std::vector<int> ids = encode_prompt(tok, pt, p.source);
  const size_t prompt = ids.size();
  const std::vector<int> t = tok.encode(p.target, "line " + std::to_string(p.line));
  ids.insert(ids.end(), t.begin(), t.end());
  ids.push_back(pt.end);
  if (mask) {
    mask->assign(ids.size(), 1);
    std::fill(mask->begin(), mask->begin() + long(prompt), 0);
  }
  return ids;
}

std::vector<int> encode_prompt(const Tokenizer& tok, const PairTokens& pt, const std::string& source) {
  std::vector<int> ids = tok.encode(source, "source");
  ids.push_back(pt.separator);
  return ids;
}

std::vector<std::string> translate(Stage<float>& stage, const Tokenizer& tok, const PairTokens& pt,
                                   const std::vector<Pair>& pairs, const TranslateOptions& o) {
  const int window = o.context > 0 ? std::min(o.context, stage.config().block_size) : stage.config().block_size;
  KvDecoder<float> decoder(stage, window);
  SampleOptions so;
  so.tokens = o.max_tokens;
  so.temperature = 0;  // greedy
  so.stop = pt.end;
  Rng rng(0, 0);  // (greedy draws nothing)
  std::vector<std::string> out;
  out.reserve(pairs.size());
  for (const Pair& p : pairs) {
    const std::vector<int> prompt = encode_prompt(tok, pt, p.source);  // (longer than the window: its end)
    std::vector<int> ids = generate(decoder, prompt, so, rng);
    // Tokens outside the tokenizer's range (a model whose vocabulary is larger) are dropped.
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int id) { return id < 0 || id >= tok.vocab_size(); }),
              ids.end());
    out.push_back(tok.decode(ids));
  }
  return out;
}

}  // namespace gpt2
