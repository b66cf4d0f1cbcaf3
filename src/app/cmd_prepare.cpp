// gpt2 prepare --tokenizer byte|gpt2 [--vocab F --merges F] [--val-fraction F] --out DIR TEXT...
// Tokenizes text files into llm.c token shards: DIR/train_000.bin ... and DIR/val_000.bin ...
// With --pairs: translation pairs (one TSV, or two aligned files) into shards of whole examples
// (source, separator, target, end of text) with their loss masks beside them (DIR/train_000.mask:
// data/token_shard.hpp), and the held-out pairs as text (DIR/val.tsv) for BLEU.
#include <unistd.h>

#include <cstdio>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "data/token_shard.hpp"
#include "plugins/tokenizer.hpp"
#include "train/translation.hpp"

namespace gpt2::app {

namespace {
struct PrepareArgs {
  std::string tokenizer = "byte", vocab, merges, out;
  std::vector<std::string> inputs;
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
  bool pairs = false;
};

void write_shards(const std::string& dir, const std::string& prefix, const std::vector<int>& ids,
                  size_t begin, size_t end, int64_t per_shard) {
  int index = 0;
  for (size_t b = begin; b < end || index == 0; b += size_t(per_shard), ++index) {
    const size_t e = std::min(end, b + size_t(per_shard));
    std::vector<uint16_t> t(ids.begin() + b, ids.begin() + e);
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%03d.bin", prefix.c_str(), index);
    write_shard(dir + "/" + name, t);
    std::printf("wrote %s/%s (%zu tokens)\n", dir.c_str(), name, t.size());
    if (e >= end) break;
  }
}

// Examples [begin, end) of `pairs` into shards of whole examples (one may exceed per_shard tokens
// when a single example does), each with its loss mask; returns the tokens written.
size_t write_pair_shards(const std::string& dir, const std::string& prefix, const Tokenizer& tok, const PairTokens& pt,
                         const std::vector<Pair>& pairs, size_t begin, size_t end, int64_t per_shard,
                         const std::string& source) {
  int index = 0;
  size_t written = 0;
  std::vector<uint16_t> tokens;
  ShardMask mask;
  mask.source = source;
  auto flush = [&]() {
    char name[64];
    std::snprintf(name, sizeof(name), "%s_%03d.bin", prefix.c_str(), index++);
    const std::string path = dir + "/" + name;
    write_shard(path, tokens);
    write_mask(mask_path(path), mask);
    std::printf("wrote %s/%s (%zu tokens, %zu examples) and its loss mask\n", dir.c_str(), name, tokens.size(),
                mask.lines.size());
    written += tokens.size();
    tokens.clear(), mask.mask.clear(), mask.lines.clear();
  };
  std::vector<uint8_t> m;
  for (size_t i = begin; i < end; ++i) {
    const std::vector<int> ids = encode_example(tok, pt, pairs[i], &m);
    if (!tokens.empty() && tokens.size() + ids.size() > size_t(per_shard)) flush();
    for (int id : ids) {
      if (id < 0 || id > 65535) fail_input(source, "line ", pairs[i].line, ": token ", id, " does not fit a shard (uint16)");
      tokens.push_back(uint16_t(id));
    }
    mask.mask.insert(mask.mask.end(), m.begin(), m.end());
    mask.lines.push_back(pairs[i].line);
  }
  if (!tokens.empty()) flush();
  return written;
}

int prepare_pairs(const PrepareArgs& a) {
  if (a.inputs.size() > 2)
    fail_input("--pairs", "expects one TSV file (source<TAB>target) or two aligned files, got ", a.inputs.size());
  auto tok = make_tokenizer(a.tokenizer, {a.vocab, a.merges});
  const PairTokens pt = pair_tokens(*tok);
  const PairsRead read = a.inputs.size() == 1 ? read_pairs(a.inputs[0]) : read_pairs(a.inputs[0], a.inputs[1]);
  const std::string source = a.inputs.size() == 1 ? a.inputs[0] : a.inputs[0] + " + " + a.inputs[1];
  const std::vector<Pair>& pairs = read.pairs;
  if (pairs.empty()) fail_input(a.inputs.front(), "holds no translation pair");
  size_t n_val = size_t(double(pairs.size()) * a.val_fraction);
  if (a.val_fraction > 0 && n_val == 0) n_val = 1;
  if (n_val >= pairs.size()) fail_input("--val-fraction", "leaves no training pair out of ", pairs.size());
  make_dirs(a.out, "--out");
  const size_t n_train = pairs.size() - n_val;
  write_pair_shards(a.out, "train", *tok, pt, pairs, 0, n_train, a.shard_tokens, source);
  if (n_val > 0) {
    write_pair_shards(a.out, "val", *tok, pt, pairs, n_train, pairs.size(), a.shard_tokens, source);
    std::string tsv;
    for (size_t i = n_train; i < pairs.size(); ++i) tsv += pairs[i].source + "\t" + pairs[i].target + "\n";
    AtomicFile f(a.out + "/val.tsv");
    f.write(tsv.data(), tsv.size());
    f.commit();
    std::printf("wrote %s/val.tsv (%zu held-out pairs as text: gpt2 eval --bleu, train.bleu_pairs)\n", a.out.c_str(),
                n_val);
  }
  if (read.skipped > 0) std::printf("skipped %d pair(s) with an empty source or target\n", read.skipped);
  std::printf("%zu pairs: separator token %d, end token %d; tokenizer %s, vocab_size %d: set model.vocab_size = %d\n",
              pairs.size(), pt.separator, pt.end, tok->name().c_str(), tok->vocab_size(), tok->vocab_size());
  return 0;
}
}  // namespace

Run add_prepare(CLI::App& app) {
  auto a = std::make_shared<PrepareArgs>();
  CLI::App* c = app.add_subcommand("prepare", "Tokenize text files into train/val token shards");
  std::string help = "Tokenizer:";
  for (const auto& t : TokenizerRegistry::entries()) help += "\n  " + t.name + ": " + t.help;
  c->add_option("--tokenizer", a->tokenizer, help)->check(CLI::IsMember(TokenizerRegistry::names()))
      ->capture_default_str();
  c->add_option("--vocab", a->vocab, "GPT-2 encoder.json (default: job_scripts/fetch_gpt2_vocab.sh's cache)");
  c->add_option("--merges", a->merges, "GPT-2 vocab.bpe (default: the same cache)");
  c->add_option("--val-fraction", a->val_fraction, "Share of tokens (the end of the stream) for validation")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  c->add_option("--shard-tokens", a->shard_tokens, "Tokens per shard file")
      ->check(CLI::Range(int64_t(1024), int64_t(1) << 31))
      ->capture_default_str();
  c->add_flag("--pairs", a->pairs,
              "Translation pairs: one TSV (source<TAB>target per line) or two aligned files (sources, targets); "
              "shards of whole examples (source, separator, target, end of text) with loss masks (the target counts), "
              "--val-fraction of the pairs held out, also as DIR/val.tsv");
  c->add_option("--out", a->out, "Output folder")->required();
  c->add_option("text", a->inputs, "Text files (concatenated in order); with --pairs: a TSV or two aligned files")
      ->required();
  return [a]() -> int {
    if (a->pairs) return prepare_pairs(*a);
    auto tok = make_tokenizer(a->tokenizer, {a->vocab, a->merges});
    std::vector<int> ids;
    size_t bytes = 0, done = 0;
    const bool tty = ::isatty(::fileno(stdout));
    for (const auto& f : a->inputs) bytes += file_size(f);
    for (const auto& f : a->inputs) {
      const std::string text = read_file(f);
      if (tok->eot() >= 0 && !ids.empty()) ids.push_back(tok->eot());  // document separator
      const std::vector<int> t = tok->encode(text, f);
      ids.insert(ids.end(), t.begin(), t.end());
      done += text.size();
      if (tty || done == bytes) {  // one updating line on a terminal, the total in logs
        std::printf("%stokenized %zu / %zu bytes (%zu files) -> %zu tokens", tty ? "\r" : "", done, bytes,
                    a->inputs.size(), ids.size());
        std::fflush(stdout);
      }
    }
    std::printf("\n");
    if (ids.empty()) fail_input(a->inputs.front(), "no text to tokenize (the input is empty)");
    const size_t n_val = size_t(double(ids.size()) * a->val_fraction);
    if (a->val_fraction > 0 && n_val < 2)
      fail_input("--val-fraction", "leaves fewer than 2 validation tokens out of ", ids.size());
    make_dirs(a->out, "--out");
    write_shards(a->out, "train", ids, 0, ids.size() - n_val, a->shard_tokens);
    if (n_val > 0) write_shards(a->out, "val", ids, ids.size() - n_val, ids.size(), a->shard_tokens);
    std::printf("tokenizer %s, vocab_size %d: set model.vocab_size = %d in the input deck\n",
                tok->name().c_str(), tok->vocab_size(), tok->vocab_size());
    return 0;
  };
}

}  // namespace gpt2::app
