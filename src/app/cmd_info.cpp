// gpt2 info [CONFIG] [--set ...] [--keys] [--checkpoint F]: build, configuration and model facts.
#include <cstdio>

#include "app/commands.hpp"
#include "app/model_files.hpp"
#include "model/param_layout.hpp"
#include "modules/parallel/stage_partition.hpp"
#include "trace/hdf5_trace.hpp"
#include "train/run_config.hpp"

#include <Kokkos_Core.hpp>

namespace gpt2::app {

namespace {
struct InfoArgs {
  std::string config, checkpoint;
  std::vector<std::string> sets;
  bool keys = false;
};

void print_model(const ModelConfig& c, int pp, int seq_len, const std::vector<int>& explicit_layers) {
  ParamLayout layout(c);
  std::printf("model: %s (padded vocab %d)\n", c.describe().c_str(), c.padded_vocab());
  std::printf("parameters: %zu (%.2f M), %.1f MiB fp32; with AdamW moments and grads %.1f MiB\n",
              layout.total(), layout.total() / 1e6, layout.total() * 4 / 1048576.0,
              layout.total() * 16 / 1048576.0);
  if (pp > 1 && pp <= c.n_layer) {
    const auto layers = partition_stages(c, pp, seq_len, explicit_layers);
    std::printf("pipeline stages (blocks each):");
    for (int n : layers) std::printf(" %d", n);
    std::printf("\n");
  }
}
}  // namespace

Run add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  CLI::App* c = app.add_subcommand("info", "Show the build, an input deck's effective configuration, or a checkpoint");
  c->add_option("config", a->config, "Input deck to resolve and print (with --set applied)");
  c->add_option("--set", a->sets, "Override a deck value: section.key=value (repeatable)");
  c->add_flag("--keys", a->keys, "List every configuration key with its default and meaning");
  c->add_option("--checkpoint", a->checkpoint, "Describe a checkpoint or llm.c model file");
  return [a]() -> int {
    if (a->keys) {
      RunConfig d;
      std::string section;
      for (const auto& f : d.fields()) {
        const std::string sec = f.key.substr(0, f.key.find('.'));
        if (sec != section) std::printf("%s[%s]\n", section.empty() ? "" : "\n", sec.c_str()), section = sec;
        RunConfig one;
        std::vector<DeckField> single;
        for (const auto& g : one.fields())
          if (g.key == f.key) single.push_back(g);
        std::string line = InputDeck::to_toml(single);
        line = line.substr(line.find('\n') + 1);
        line.pop_back();
        std::printf("%-40s # %s\n", line.c_str(), f.help.c_str());
      }
      return 0;
    }
    std::printf("gpt2-kokkos %s (git %s)\n", GPT2_VERSION, git_revision().c_str());
    std::printf("Kokkos %d.%d.%d, default execution space: %s\n", KOKKOS_VERSION / 10000,
                KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100, Kokkos::DefaultExecutionSpace::name());
#if defined(GPT2_HAVE_NCCL)
    std::printf("communication: MPI (host staging), NCCL (device)\n");
#else
    std::printf("communication: MPI (host buffers); NCCL needs a CUDA build\n");
#endif
    if (!a->checkpoint.empty()) {
      LoadedModel m = load_model(a->checkpoint);
      std::printf("%s: %s", a->checkpoint.c_str(), m.format.c_str());
      if (m.step >= 0) std::printf(" after %lld steps (checksums verified)", (long long)m.step);
      std::printf("\n");
      print_model(m.config, 1, m.config.block_size, {});
    }
    if (!a->config.empty()) {
      RunConfig cfg = RunConfig::load(a->config, a->sets);
      cfg.validate();
      std::printf("\n# effective configuration of %s\n%s\n", a->config.c_str(), cfg.toml().c_str());
      print_model(cfg.model, cfg.parallel.pp, cfg.data.seq_len, cfg.parallel.stage_layers);
      std::printf("ranks needed: %d (dp %d x pp %d)\n", cfg.parallel.dp * cfg.parallel.pp, cfg.parallel.dp,
                  cfg.parallel.pp);
    }
    return 0;
  };
}

}  // namespace gpt2::app
