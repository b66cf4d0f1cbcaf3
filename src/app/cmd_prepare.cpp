// gpt2 prepare --tokenizer byte|gpt2 [--vocab F --merges F] [--val-fraction F] --out DIR TEXT...
// Tokenizes text files into llm.c token shards: DIR/train_000.bin ... and DIR/val_000.bin ...
#include <unistd.h>

#include <cstdio>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "data/token_shard.hpp"
#include "runtime/tokenizer.hpp"

namespace gpt2::app {

namespace {
struct PrepareArgs {
  std::string tokenizer = "byte", vocab, merges, out;
  std::vector<std::string> inputs;
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
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
  c->add_option("--out", a->out, "Output folder")->required();
  c->add_option("text", a->inputs, "Text files (concatenated in order)")->required();
  return [a]() -> int {
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
