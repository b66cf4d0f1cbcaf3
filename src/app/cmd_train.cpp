// gpt2 train CONFIG [--set section.key=value]... [--metrics-jsonl FILE]
#include <chrono>
#include <cstdio>
#include <thread>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "runtime/collective.hpp"
#include "runtime/environment.hpp"
#include "runtime/stop_signals.hpp"
#include "train/trainer.hpp"

namespace gpt2::app {

namespace {
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string metrics;
  bool quiet = false;
  int stop_at = 0;
};
}  // namespace

Run add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "Train a GPT-2 from an input deck (run under mpiexec/srun for several ranks)");
  c->add_option("config", a->config, "TOML input deck (see inputs/)")->required();
  c->add_option("--set", a->sets, "Override a deck value: section.key=value (repeatable)");
  c->add_option("--metrics-jsonl", a->metrics, "Write one JSON object per step to this file (rank 0)");
  c->add_flag("-q,--quiet", a->quiet, "No progress lines");
  c->add_option("--stop-at", a->stop_at,
                "Stop after this step, checkpointing as at the end (resume later with checkpoint.resume)")
      ->check(positive_count());
  c->footer("Ranks: parallel.dp * parallel.tp * parallel.pp must equal the number of MPI ranks.\n"
            "See `gpt2 info --keys` for every configuration key.\n"
            "SIGTERM, SIGINT or SIGUSR1 (to any rank, to mpiexec, which passes them on, or scancel --signal;\n"
            "srun passes on only SIGUSR1, it kills the ranks on SIGTERM): every rank finishes its step, a\n"
            "checkpoint is written (checkpoint.dir), the trace and metrics are flushed; a second signal ends\n"
            "the run at once.\n"
            "Exit status: 0 done, 1 failure, 2 bad input, 3 a rank hung (watchdog), 4 stopped by a signal\n"
            "(resume with checkpoint.resume = \"auto\"), 5 a non-finite loss or gradient norm (train.nonfinite).");
  return [a]() -> int {
    // Under MPICH's mpiexec a child keeps this rank's exit status visible to the launcher (4 after
    // a stop signal passed on by mpiexec; see stop_signals.hpp). First: before MPI and Kokkos.
    start_exit_witness();
    // From here on a stop signal only sets a flag (MPI and Kokkos start up below; a run asked to
    // stop by then ends before its first step).
    StopSignals stop_signals;
    Environment env{Environment::MpiOnly{}};
    stop_signals.reclaim();
    const bool root = env.rank() == 0;
    try {
      RunConfig cfg;
      collective_phase(MPI_COMM_WORLD, [&] { cfg = RunConfig::load(a->config, a->sets); });
      env.start_kokkos(cfg.parallel.host_threads);  // its threads per rank come from the deck
      stop_signals.reclaim();
      TrainOptions opts;
      opts.metrics_jsonl = a->metrics;
      opts.quiet = a->quiet;
      opts.stop_at = a->stop_at;
      Trainer trainer(cfg, env, opts);
      const RunEnd end = trainer.run();
      if (end == RunEnd::completed) return env.exit_status(0);
      if (root) {
        std::fprintf(stderr, "%s%s\n", end == RunEnd::diverged ? "error: " : "gpt2 train: ", trainer.end_message().c_str());
        std::fflush(stderr);
      }
      return env.exit_status(end == RunEnd::stopped ? kExitStopped : kExitDiverged);
    } catch (const CollectiveError& e) {
      if (root) std::fprintf(stderr, "error: %s\n", e.what());
      return env.exit_status(e.input_error() ? 2 : 1);
    } catch (const std::exception& e) {
      // Only this rank knows: stop the whole job rather than leave the others waiting.
      std::fprintf(stderr, "error (rank %d): %s\n", env.rank(), e.what());
      std::fflush(stderr);
      // (the launcher forwards output asynchronously and MPI_Abort tears the job down at once: a
      // loaded node lost this line without a moment's grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      MPI_Abort(MPI_COMM_WORLD, dynamic_cast<const InputError*>(&e) ? 2 : 1);
    }
    return 0;
  };
}

}  // namespace gpt2::app
