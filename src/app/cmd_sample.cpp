// gpt2 sample --checkpoint F [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--seed S]
//             [--no-kv-cache] [--benchmark]
#include <chrono>
#include <cstdio>

#include "app/commands.hpp"
#include "app/whole_model.hpp"
#include "core/error.hpp"
#include "formats/model_file.hpp"
#include "runtime/environment.hpp"
#include "train/sampler.hpp"

namespace gpt2::app {

namespace {
struct SampleArgs {
  std::string checkpoint, prompt, tokenizer = "auto";
  SampleOptions opts;
  int64_t seed = 1337;
  int seq_len = 0;
  bool no_cache = false, benchmark = false;
};
}  // namespace

Run add_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  a->opts.tokens = 200;
  a->opts.temperature = 0.8;
  a->opts.top_k = 40;
  CLI::App* c = app.add_subcommand("sample", "Generate text from a checkpoint or an llm.c model file");
  c->add_option("--checkpoint", a->checkpoint, "Checkpoint file or folder (its latest), or llm.c model")->required();
  c->add_option("--prompt", a->prompt, "Text to continue (default: start of text)");
  c->add_option("--tokens", a->opts.tokens, "Tokens to generate")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--temperature", a->opts.temperature, "Softmax temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  c->add_option("--top-k", a->opts.top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  std::vector<std::string> tokenizers = TokenizerRegistry::names();
  tokenizers.insert(tokenizers.begin(), "auto");
  c->add_option("--tokenizer", a->tokenizer, "auto (from the vocabulary size) | " + TokenizerRegistry::alternatives())
      ->check(CLI::IsMember(tokenizers))
      ->capture_default_str();
  c->add_option("--seq-len", a->seq_len, "Context window (default: the model's block_size)")
      ->check(CLI::Range(1, 1 << 20));
  c->add_flag("--no-kv-cache", a->no_cache, "Recompute the whole window for every token (the KV cache's reference)");
  c->add_flag("--benchmark", a->benchmark,
              "Generate --tokens tokens with and without the KV cache (same seed), print both rates and whether the "
              "tokens are identical (exit 1 if not)");
  return [a]() -> int {
    Environment env;
    const ModelFile file(a->checkpoint, "--checkpoint");
    file.verify();
    const ModelConfig& config = file.config();
    const WholeModel whole = load_whole_model(file, a->seq_len);
    Stage<float>& stage = *whole.stage;
    const int T = whole.seq_len;
    auto tok = make_sample_tokenizer(a->tokenizer, config.vocab_size);
    std::vector<int> prompt = a->prompt.empty() ? std::vector<int>{} : tok->encode(a->prompt, "--prompt");
    if (prompt.empty()) prompt.push_back(tok->eot() >= 0 ? tok->eot() : int('\n'));
    for (int id : prompt)
      if (id >= config.vocab_size)
        fail_input("--prompt", "token ", id, " is outside the model's vocabulary (", config.vocab_size, ")");
    if (a->benchmark) {
      // Each way twice, the second timed (the first sizes workspaces and warms caches).
      auto timed = [&](bool cache, double& seconds) {
        SampleOptions o = a->opts;
        o.kv_cache = cache;
        std::vector<int> out;
        for (int round = 0; round < 2; ++round) {
          Rng rng(uint64_t(a->seed), 77);
          const auto t0 = std::chrono::steady_clock::now();
          out = generate(stage, prompt, o, rng);
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        return out;
      };
      double with_s = 0, without_s = 0;
      const std::vector<int> with = timed(true, with_s), without = timed(false, without_s);
      const bool same = with == without;
      std::printf("prompt %zu tokens, %zu new tokens, context %d, %s\n", prompt.size(), with.size(), T,
                  config.describe().c_str());
      std::printf("kv cache:    %.3f s, %.1f tokens/s\n", with_s, double(with.size()) / with_s);
      std::printf("no kv cache: %.3f s, %.1f tokens/s\n", without_s, double(without.size()) / without_s);
      std::printf("speed-up %.2fx; tokens identical: %s\n", without_s / with_s, same ? "yes" : "NO");
      return same ? 0 : 1;
    }
    Rng rng(uint64_t(a->seed), 77);
    SampleOptions o = a->opts;
    o.kv_cache = !a->no_cache;
    const std::vector<int> out = generate(stage, prompt, o, rng);
    std::printf("%s%s\n", a->prompt.c_str(), tok->decode(out).c_str());
    return 0;
  };
}

}  // namespace gpt2::app
