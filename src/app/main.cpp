// gpt2: train, prepare data, sample, convert and inspect GPT-2 models.
// Exit status: 0 success, 1 failure, 2 bad input (config, files, flags), 3 a rank died or hung,
// 4 training stopped by a signal (its steps saved), 5 training diverged (non-finite values).
#include <cstdio>
#include <cstdlib>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "runtime/build_info.hpp"
#include "runtime/collective.hpp"

namespace gpt2::app {
int launcher_rank() {
  for (const char* v : {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

CLI::Validator positive_count() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (end == text.c_str() || *end != '\0' || v <= 0) return "a positive whole number is needed, got " + text;
        return "";
      },
      "POSITIVE");
}
}  // namespace gpt2::app

int main(int argc, char** argv) {
  using namespace gpt2;
  CLI::App app{"gpt2-kokkos: train GPT-2 with data (ZeRO 0-3), tensor and pipeline parallelism (Kokkos + MPI/NCCL)", "gpt2"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("error: ") + e.what() + "\nRun with --help for more information.\n";
  });
  app.set_version_flag("--version", "gpt2-kokkos " + version());
  app.footer(
      "Examples:\n"
      "  gpt2 prepare --tokenizer byte --out data/licenses /usr/share/common-licenses/*\n"
      "  mpiexec -n 2 gpt2 train inputs/tiny.toml --set parallel.dp=2 --set checkpoint.dir=runs/tiny\n"
      "  gpt2 sample --checkpoint runs/tiny --prompt 'The '\n"
      "  gpt2 eval --bleu data/pairs/val.tsv --checkpoint runs/translation/checkpoints\n"
      "  gpt2 plan inputs/gpt2-124M.toml --hardware inputs/hardware/h100.toml --gpus 1024\n"
      "Run `gpt2 <command> --help` for each command's options.");
  app::Run train = app::add_train(app), prepare = app::add_prepare(app), sample = app::add_sample(app),
           convert = app::add_convert(app), info = app::add_info(app), simulate = app::add_simulate(app),
           plan = app::add_plan(app), eval = app::add_eval(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Under mpiexec every rank parses the same command line: let one of them speak.
    if (app::launcher_rank() != 0) return e.get_exit_code() == 0 ? 0 : 2;
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    for (auto* sub : app.get_subcommands()) {
      const std::string name = sub->get_name();
      if (name == "train") return train();
      if (name == "prepare") return prepare();
      if (name == "sample") return sample();
      if (name == "convert") return convert();
      if (name == "info") return info();
      if (name == "simulate") return simulate();
      if (name == "plan") return plan();
      if (name == "eval") return eval();
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
