// gpt2 eval --bleu PAIRS --checkpoint F [--tokenizer T] [--max-tokens N] [--seq-len N] [--limit N]
//           [--smooth M] [--smooth-value X] [--tokenize 13a|none] [--lowercase] [--hypotheses FILE]
// Translates a held-out pairs file's sources (greedy, with the KV cache) and prints corpus BLEU as
// sacreBLEU computes it (train/bleu.hpp).
#include <chrono>
#include <cstdio>

#include "app/commands.hpp"
#include "app/whole_model.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "formats/model_file.hpp"
#include "runtime/environment.hpp"
#include "train/bleu.hpp"
#include "train/sampler.hpp"
#include "train/translation.hpp"

namespace gpt2::app {

namespace {
struct EvalArgs {
  std::string checkpoint, bleu, tokenizer = "auto", hypotheses;
  BleuOptions opts;
  int max_tokens = 128, seq_len = 0, limit = 0;
};
}  // namespace

Run add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* c = app.add_subcommand("eval", "Translate a held-out pairs file and print its corpus BLEU (sacreBLEU's)");
  c->add_option("--bleu", a->bleu,
                "Pairs file (source<TAB>target per line, as `gpt2 prepare --pairs` reads and writes as DIR/val.tsv)")
      ->required();
  c->add_option("--checkpoint", a->checkpoint, "Checkpoint file or folder (its latest), or llm.c model")->required();
  std::vector<std::string> tokenizers = TokenizerRegistry::names();
  tokenizers.insert(tokenizers.begin(), "auto");
  c->add_option("--tokenizer", a->tokenizer,
                "The tokenizer the pairs were prepared with: auto (from the vocabulary size) | " +
                    TokenizerRegistry::alternatives())
      ->check(CLI::IsMember(tokenizers))
      ->capture_default_str();
  c->add_option("--max-tokens", a->max_tokens, "Most tokens of a translation (the end token stops it sooner)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  c->add_option("--seq-len", a->seq_len, "Context window for source and translation (default: block_size)")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--limit", a->limit, "Translate only the first N pairs (0: all)")->check(CLI::Range(0, 1 << 30));
  c->add_option("--smooth", a->opts.smooth, "BLEU smoothing: exp (default) | floor | add-k | none")
      ->transform(word_choices({BleuSmooth::exp, BleuSmooth::floor, BleuSmooth::add_k, BleuSmooth::none}));
  c->add_option("--smooth-value", a->opts.smooth_value, "floor's or add-k's value (default: 0.1, 1)");
  c->add_option("--tokenize", a->opts.tokenize, "BLEU tokenization: 13a (default) | none")
      ->transform(word_choices({BleuTokenize::mteval_13a, BleuTokenize::none}));
  c->add_flag("--lowercase", a->opts.lowercase, "Lowercase hypotheses and references (ASCII letters)");
  c->add_option("--hypotheses", a->hypotheses, "Also write the translations here, one a line");
  return [a]() -> int {
    Environment env;
    const ModelFile file(a->checkpoint, "--checkpoint");
    file.verify();
    if (!a->hypotheses.empty()) prepare_output_file(a->hypotheses, "--hypotheses");
    const ModelConfig& config = file.config();
    const WholeModel whole = load_whole_model(file, a->seq_len);
    Stage<float>& stage = *whole.stage;
    const int T = whole.seq_len;
    auto tok = make_sample_tokenizer(a->tokenizer, config.vocab_size);
    const PairTokens pt = pair_tokens(*tok);
    std::vector<Pair> pairs = read_pairs(a->bleu).pairs;
    if (a->limit > 0 && size_t(a->limit) < pairs.size()) pairs.resize(size_t(a->limit));
    if (pairs.empty()) fail_input(a->bleu, "holds no translation pair");
    TranslateOptions to;
    to.max_tokens = a->max_tokens;
    to.context = T;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::string> hyps = translate(stage, *tok, pt, pairs, to);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::string> refs;
    for (const Pair& p : pairs) refs.push_back(p.target);
    const BleuScore score = corpus_bleu(hyps, {refs}, a->opts);
    if (!a->hypotheses.empty()) {
      std::string text;
      for (const std::string& h : hyps) text += h + "\n";
      AtomicFile f(a->hypotheses);
      f.write(text.data(), text.size());
      f.commit();
    }
    std::printf("%zu pairs translated in %.2f s (greedy, KV cache)\n", pairs.size(), seconds);
    std::printf("%s\n", score.describe().c_str());
    return 0;
  };
}

}  // namespace gpt2::app
