// gpt2 info [CONFIG] [--set ...] [--keys] [--checkpoint F] [--json]: build, configuration and model
// facts; --json prints them as one JSON object for scripts (job_scripts/lib/run_common.sh reads it);
// --accepts asks whether many layouts of a deck are accepted, in one process.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <optional>
#include <variant>

#include "app/commands.hpp"
#include "core/choice.hpp"
#include "core/json.hpp"
#include "formats/model_file.hpp"
#include "model/param_layout.hpp"
#include "parallel/stage_partition.hpp"
#include "runtime/build_info.hpp"
#include "plugins/communicator.hpp"
#include "plugins/lr_schedule.hpp"
#include "plugins/optimizer.hpp"
#include "pipeline/schedule.hpp"
#include "plugins/tokenizer.hpp"
#include "tensor/gemm_lowp.hpp"
#include "train/run_config.hpp"

namespace gpt2::app {

namespace {
// The deck of the run that wrote a checkpoint (it holds it as TOML); none for llm.c files.
std::optional<RunConfig> written_by(const ModelFile& m) {
  if (m.meta().config_toml.empty()) return std::nullopt;
  RunConfig c;
  try {
    InputDeck::from_string(m.meta().config_toml, m.path()).bind(c.fields(), /*ignore_unknown=*/true);
  } catch (const InputError&) {
    return std::nullopt;  // a deck from another version: the rest of the description stands
  }
  return c;
}

struct InfoArgs {
  std::string config, checkpoint, accepts;
  std::vector<std::string> sets;
  bool keys = false, json = false;
};

std::vector<int> stage_split(const ModelConfig& c, int pp, int seq_len, const std::vector<int>& explicit_layers) {
  if (pp > 1 && pp <= c.n_layer) return partition_stages(c, pp, seq_len, explicit_layers);
  return {c.n_layer};
}

void print_model(const ModelConfig& c, int pp, int seq_len, const std::vector<int>& explicit_layers) {
  ParamLayout layout(c);
  std::printf("model: %s (padded vocab %d)\n", c.describe().c_str(), c.padded_vocab());
  std::printf("parameters: %zu (%.2f M), %.1f MiB fp32; with AdamW moments and grads %.1f MiB\n",
              layout.total(), layout.total() / 1e6, layout.total() * 4 / 1048576.0,
              layout.total() * 16 / 1048576.0);
  if (pp > 1 && pp <= c.n_layer) {
    std::printf("pipeline stages (blocks each):");
    for (int n : stage_split(c, pp, seq_len, explicit_layers)) std::printf(" %d", n);
    std::printf("\n");
  }
}

// The TOML text of one field's current value ("dp = 2").
std::string field_toml(const DeckField& f) {
  std::string line = InputDeck::to_toml({f});
  line = line.substr(line.find('\n') + 1);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

void json_field(Json& j, const DeckField& f) {
  std::visit(
      [&](auto* p) {
        using D = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<D, Word>) {
          const std::string w = p->text();
          if (is_bool_word(w)) j.value(w == "true");
          else j.value(w);
        } else {
          j.value(*p);
        }
      },
      f.dst);
}

void json_model(Json& j, const ModelConfig& c) {
  j.begin_object();
  j.key("n_layer").value(c.n_layer).key("n_head").value(c.n_head).key("n_embd").value(c.n_embd);
  j.key("vocab_size").value(c.vocab_size).key("block_size").value(c.block_size);
  j.key("padded_vocab").value(c.padded_vocab()).key("num_params").value((unsigned long long)ParamLayout(c).total());
  j.end();
}

template <class R>
void json_names(Json& j, const char* key) {
  j.key(key).values(R::names());
}

int print_json(const InfoArgs& a) {
  Json j;
  j.begin_object();
  j.key("version").value(version()).key("git_revision").value(git_revision());
  j.key("kokkos").value(kokkos_version()).key("execution_space").value(default_execution_space());
  j.key("gemm_fp32").value(gemm_host_f32_backend()).key("gemm_bf16").value(gemm_lowp_backend(true)).key("gemm_fp16").value(gemm_lowp_backend(false));
  j.key("strategies").begin_object();
  json_names<CommRegistry>(j, "comm");
  json_names<ScheduleRegistry>(j, "schedule");
  json_names<OptimizerRegistry>(j, "optimizer");
  json_names<LrScheduleRegistry>(j, "lr_schedule");
  json_names<TokenizerRegistry>(j, "tokenizer");
  j.end();
  if (a.keys) {
    RunConfig d;
    j.key("keys").begin_array();
    for (const DeckField& f : d.fields())
      j.begin_object().key("key").value(f.key).key("default").value(field_toml(f)).key("help").value(f.help).end();
    j.end();
  }
  if (!a.checkpoint.empty()) {
    const ModelFile m(a.checkpoint, "--checkpoint");
    m.verify();
    j.key("checkpoint").begin_object();
    j.key("path").value(m.path()).key("format").value(m.format()).key("step").value((long long)m.meta().step);
    j.key("model");
    json_model(j, m.config());
    if (const auto w = written_by(m)) {
      j.key("written_by").begin_object().key("dp").value(w->parallel.dp).key("pp").value(w->parallel.pp);
      j.key("tp").value(w->parallel.tp).key("zero").value(w->parallel.zero).end();
    }
    j.key("tensors").begin_array();
    const ParamLayout layout(m.config());  // (named: the loop must not outlive it)
    for (const TensorInfo& t : layout.tensors()) {
      std::vector<long long> shape(t.shape.begin(), t.shape.end());
      j.begin_object().key("name").value(t.name()).key("shape").values(shape).end();
    }
    j.end();
    j.end();
  }
  if (!a.config.empty()) {
    RunConfig cfg = RunConfig::load(a.config, a.sets);
    cfg.validate();
    const GridShape g = cfg.grid();
    j.key("grid").begin_object().key("dp").value(g.dp).key("pp").value(g.pp).key("cp").value(g.cp).key("tp").value(g.tp);
    j.key("world_size").value(g.world()).end();
    j.key("stage_layers").values(stage_split(cfg.model, g.pp, cfg.data.seq_len, cfg.parallel.stage_layers));
    j.key("model");
    json_model(j, cfg.model);
    j.key("config").begin_object();
    std::string section;
    for (const DeckField& f : cfg.fields()) {
      const std::string sec = f.key.substr(0, f.key.find('.'));
      if (sec != section) {
        if (!section.empty()) j.end();
        j.key(sec).begin_object();
        section = sec;
      }
      j.key(f.key.substr(f.key.find('.') + 1));
      json_field(j, f);
    }
    if (!section.empty()) j.end();
    j.end();
    j.key("config_toml").value(cfg.toml());
  }
  j.end();
  std::printf("%s\n", j.str().c_str());
  return 0;
}
// --accepts FILE: for each line of FILE (overrides `section.key=value` separated by spaces, applied to
// the deck after --set), whether the engine accepts the layout -- the deck's validation, the pass
// lists built and proven -- as one JSON line: {"line": N, "accepted": true} or {..., "error": "..."}.
// Scripts (the layout matrix) ask the engine instead of copying its rules.
int print_accepts(const InfoArgs& a) {
  std::ifstream in(a.accepts);
  if (!in) fail_input("--accepts", "cannot read ", a.accepts);
  InputDeck base = InputDeck::from_file(a.config);  // read once; each line applies to a copy
  for (const auto& o : a.sets) base.set(o);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    Json j;
    j.begin_object().key("line").value(n);
    try {
      InputDeck deck = base;
      std::istringstream words(line);
      for (std::string w; words >> w;) deck.set(w);
      RunConfig cfg = RunConfig::from_deck(deck);
      cfg.validate();
      j.key("accepted").value(true);
    } catch (const InputError& e) {
      j.key("accepted").value(false).key("error").value(std::string(e.what()));
    }
    j.end();
    std::printf("%s\n", j.str().c_str());
  }
  return 0;
}
}  // namespace

Run add_info(CLI::App& app) {
  auto a = std::make_shared<InfoArgs>();
  CLI::App* c = app.add_subcommand("info", "Show the build, an input deck's effective configuration, or a checkpoint");
  c->add_option("config", a->config, "Input deck to resolve and print (with --set applied)");
  c->add_option("--set", a->sets, "Override a deck value: section.key=value (repeatable)");
  c->add_flag("--keys", a->keys, "List every configuration key with its default and meaning");
  c->add_option("--checkpoint", a->checkpoint, "Describe a checkpoint or llm.c model file");
  c->add_flag("--json", a->json, "Print everything as one JSON object (for scripts)");
  c->add_option("--accepts", a->accepts,
                "Whether the deck's layout is accepted with each line of FILE (overrides section.key=value, "
                "space-separated) applied: one JSON line each, with the engine's reason when refused");
  return [a]() -> int {
    if (!a->accepts.empty()) {
      if (a->config.empty()) fail_input("--accepts", "needs an input deck to apply the lines to");
      return print_accepts(*a);
    }
    if (a->json) return print_json(*a);
    if (a->keys) {
      RunConfig d;
      std::string section;
      for (const auto& f : d.fields()) {
        const std::string sec = f.key.substr(0, f.key.find('.'));
        if (sec != section) std::printf("%s[%s]\n", section.empty() ? "" : "\n", sec.c_str()), section = sec;
        std::printf("%-40s # %s\n", field_toml(f).c_str(), f.help.c_str());
      }
      return 0;
    }
    std::printf("gpt2-kokkos %s (git %s)\n", version().c_str(), git_revision().c_str());
    std::printf("Kokkos %s, default execution space: %s\n", kokkos_version().c_str(), default_execution_space().c_str());
    std::printf("fp32 GEMMs: %s\n", gemm_host_f32_backend().c_str());
    std::printf("16-bit GEMMs (train.precision): bf16 on %s, fp16 on %s\n", gemm_lowp_backend(true).c_str(),
                gemm_lowp_backend(false).c_str());
    std::printf("communication backends: %s\n", CommRegistry::alternatives().c_str());
    std::printf("pipeline schedules: %s\n", ScheduleRegistry::alternatives().c_str());
    if (!a->checkpoint.empty()) {
      const ModelFile m(a->checkpoint, "--checkpoint");
      m.verify();
      std::printf("%s: %s", m.path().c_str(), m.format().c_str());
      if (m.meta().step >= 0) std::printf(" after %lld steps (checksums verified)", (long long)m.meta().step);
      std::printf("\n");
      if (const auto w = written_by(m))
        std::printf("written by a run on %s, ZeRO %d (tensors at their global shapes: any layout reads it)\n",
                    w->grid().describe().c_str(), w->parallel.zero);
      print_model(m.config(), 1, m.config().block_size, {});
    }
    if (!a->config.empty()) {
      RunConfig cfg = RunConfig::load(a->config, a->sets);
      cfg.validate();
      std::printf("\n# effective configuration of %s\n%s\n", a->config.c_str(), cfg.toml().c_str());
      print_model(cfg.model, cfg.parallel.pp, cfg.data.seq_len, cfg.parallel.stage_layers);
      std::printf("ranks needed: %lld (%s)\n", cfg.grid().world(), cfg.grid().describe().c_str());
    }
    return 0;
  };
}

}  // namespace gpt2::app
