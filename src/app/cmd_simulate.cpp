// gpt2 simulate CONFIG [--set k=v]... [--calibrate TRACE] [--hardware FILE] [--ranks N] [--json]:
// predicts one training step of the configuration's layout (src/perf/step_model); with
// --print-schedule it prints the layout's pipeline schedule as a schedule file instead.
// gpt2 simulate --measure-comm (under mpiexec, 2+ ranks): measures this machine's links for a
// hardware file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "perf/calibration.hpp"
#include "perf/step_model.hpp"
#include "runtime/comm_groups.hpp"
#include "runtime/environment.hpp"
#include "pipeline/schedule_file.hpp"
#include "pipeline/schedule_lists.hpp"
#include "runtime/topology.hpp"
#include "tensor/views.hpp"
#include "train/run_config.hpp"

namespace gpt2::app {

std::string default_hardware() { return Hardware::directory() + "/devbox.toml"; }

namespace {
struct SimulateArgs {
  std::string config, calibrate, hardware, batch;
  Precision precision = Precision::fp32;
  std::vector<std::string> sets;
  long long ranks = 0;
  bool json = false, measure = false, print_schedule = false;
};

double mib(double b) { return b / 1048576.0; }

// Least-squares line t = a + k x through the points.
std::pair<double, double> fit(const std::vector<double>& x, const std::vector<double>& t) {
  const double n = double(x.size());
  double sx = 0, st = 0, sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) sx += x[i], st += t[i], sxx += x[i] * x[i], sxt += x[i] * t[i];
  const double k = (n * sxt - sx * st) / (n * sxx - sx * sx);
  return {std::max(0.0, (st - k * sx) / n), k};
}

// Best-of-R times of point-to-point messages and the three collectives over every rank, 4 KiB to
// 16 MiB; rank 0 prints the fitted alpha-beta numbers as hardware-file lines.
int measure_comm() {
  Environment env;
  if (env.size() < 2) {
    if (env.rank() == 0) std::fprintf(stderr, "error: --measure-comm: run it on 2 or more ranks (mpiexec -n 2 gpt2 simulate --measure-comm)\n");
    return 2;
  }
  Topology topo(MPI_COMM_WORLD, GridShape{env.size(), 1, 1, 1});
  CommContext node;
  node.local_size = env.local_size(), node.local_rank = env.local_rank();
  CommGroups groups(topo, "auto", node);
  Communicator& c = *groups.dp;
  const int n = c.size(), me = c.rank(), reps = 25;
  const size_t max_elems = size_t(16) << 20 >> 2;
  Buffer<float> a("measure_a", max_elems), b("measure_b", max_elems);
  std::vector<double> sizes, p2p, ar, rs;
  auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  for (size_t elems = 1024; elems <= max_elems; elems *= 4) {
    const size_t piece = elems / size_t(n);
    double best_p2p = 1e30, best_ar = 1e30, best_rs = 1e30;
    for (int r = 0; r < reps; ++r) {
      c.barrier();
      double t = now();
      // (The host waits for each operation: its time is what is measured.)
      auto done = [&](Request q) { c.wait(q); };
      if (me == 0) {  // ping-pong with rank 1: half the round trip
        done(c.isend(a.data(), elems, DType::f32, 1, 7));
        done(c.irecv(b.data(), elems, DType::f32, 1, 8));
      } else if (me == 1) {
        done(c.irecv(b.data(), elems, DType::f32, 0, 7));
        done(c.isend(a.data(), elems, DType::f32, 0, 8));
      }
      best_p2p = std::min(best_p2p, (now() - t) / 2);
      c.barrier();
      t = now();
      done(c.iallreduce(a.data(), elems, DType::f32, ReduceOp::sum));
      best_ar = std::min(best_ar, now() - t);
      c.barrier();
      t = now();
      Request q = c.ireduce_scatter(a.data(), b.data(), piece, DType::f32, ReduceOp::sum);
      c.wait(q);
      best_rs = std::min(best_rs, now() - t);
    }
    sizes.push_back(double(elems) * 4);
    p2p.push_back(c.host_max(best_p2p));
    ar.push_back(c.host_max(best_ar));
    rs.push_back(c.host_max(best_rs));
  }
  if (me == 0) {
    const auto [a_p, k_p] = fit(sizes, p2p);
    const auto [a_ar, k_ar] = fit(sizes, ar);
    const auto [a_rs, k_rs] = fit(sizes, rs);
    // all-reduce: 2 (n-1) alpha + 2 (n-1)/n S / beta; reduce-scatter: (n-1) alpha + (n-1)/n S / beta
    const double bw_ar = 2.0 * (n - 1) / n / k_ar, lat_ar = a_ar / (2.0 * (n - 1));
    const double bw_rs = double(n - 1) / n / k_rs, lat_rs = a_rs / (n - 1);
    std::printf("# gpt2 simulate --measure-comm: %d ranks, backend %s, best of %d, 4 KiB .. 16 MiB\n", n,
                groups.backend.c_str(), reps);
    std::printf("#   size_bytes  send_us  allreduce_us  reduce_scatter_us\n");
    for (size_t i = 0; i < sizes.size(); ++i)
      std::printf("#   %10.0f %8.1f %12.1f %12.1f\n", sizes[i], p2p[i] * 1e6, ar[i] * 1e6, rs[i] * 1e6);
    std::printf("# point-to-point: latency %.2f us, bandwidth %.2f GB/s\n", a_p * 1e6, 1e-9 / k_p);
    std::printf("# reduce-scatter: latency %.2f us, bandwidth %.2f GB/s\n", lat_rs * 1e6, bw_rs * 1e-9);
    std::printf("[intra_node]  # from the all-reduce fit\nbandwidth_gbs = %.3f\nlatency_us = %.2f\n", bw_ar * 1e-9,
                lat_ar * 1e6);
  }
  return 0;
}

void print_text(const StepPrediction& p, const SimulateArgs& a, const CostModel& cm, const Calibration* cal,
                const std::string& dp_note) {
  const Layout& l = p.layout;
  const Workload& w = cm.workload();
  std::printf("layout: %s (%lld ranks%s)\n", l.describe().c_str(), l.world(), dp_note.c_str());
  std::printf("model: %s, T %d, batch %lld sequences, microbatch %lld\n", w.model.describe().c_str(), w.seq_len,
              (long long)w.batch, (long long)(w.batch / l.dp / l.microbatches));
  std::printf("hardware: %s (%s)\n", cm.hardware().name.c_str(), cm.hardware().file.c_str());
  if (cal)
    std::printf("calibration: %s (%s%s, microbatch %d, tp %d, %d steps): block forward %.2f ms, backward %.2f ms per microbatch\n",
                cal->path.c_str(), cal->has_units ? "unit events" : "stage events shared out by FLOPs",
                cal->blas_threads > 0 ? (", " + std::to_string(cal->blas_threads) + " BLAS thread(s)").c_str() : "",
                cal->microbatch, cal->tp, cal->steps_used, cal->forward.block * 1e3, cal->backward.block * 1e3);
  else if (cm.hardware().multiprocessors > 0)
    std::printf("calibration: none (GEMMs by shape: tiles in waves over %d multiprocessors at up to %.2f of peak; "
                "bandwidth x %.2f)\n",
                cm.hardware().multiprocessors, cm.hardware().gemm_efficiency, cm.hardware().memory_efficiency);
  else
    std::printf("calibration: none (the hardware's peak x gemm_efficiency %.2f, bandwidth x %.2f)\n",
                cm.hardware().gemm_efficiency, cm.hardware().memory_efficiency);
  std::printf("blocks per %s:", l.virtual_stages > 1 || p.stage_layers.size() > size_t(l.pp) ? "virtual stage" : "stage");
  for (int n : p.stage_layers) std::printf(" %d", n);
  std::printf("\n\npredicted step: %.1f ms, %.0f tokens/s, MFU %.1f%%\n", p.step_s * 1e3, p.tokens_per_s, 100 * p.mfu);
  std::printf("  busiest stage's compute %.1f ms, bubble %.3f, exposed communication %.1f ms (%.1f%% of the step)\n",
              p.compute_s * 1e3, p.bubble, p.exposed_comm_s * 1e3, 100 * p.exposed_comm_s / p.step_s);
  std::printf("\nmemory per rank (MiB)   params    grads  optimizer  activations  workspace     total\n");
  for (size_t s = 0; s < p.stage_memory.size(); ++s) {
    const RankMemory& m = p.stage_memory[s];
    std::printf("  stage %-3zu (%2d in flight) %8.1f %8.1f %10.1f %12.1f %10.1f %9.1f\n", s, p.peak_in_flight[s],
                mib(m.params), mib(m.grads), mib(m.optimizer), mib(m.activations), mib(m.workspace), mib(m.total()));
  }
  std::printf("device memory: %.1f GiB; largest rank needs %.2f GiB\n", cm.hardware().memory_bytes / 1073741824.0,
              p.peak_memory() / 1073741824.0);
  (void)a;
}

int print_schedule(const RunConfig& cfg) {
  const ParallelConfig& p = cfg.parallel;
  const Placement pl = schedule_placement(ScheduleRegistry::get(p.schedule, "parallel.schedule"), p.pp, p.virtual_stages);
  const auto ranks = make_schedules(p.schedule, p.pp, p.microbatches, pl.chunks, cfg.pass_costs());
  std::fputs(format_schedule_file(p.schedule, pl, ranks).c_str(), stdout);
  return 0;
}

void print_json(const StepPrediction& p, const CostModel& cm, const Calibration* cal) {
  const Layout& l = p.layout;
  Json j;
  j.begin_object();
  j.key("layout").begin_object();
  j.key("dp").value(l.dp).key("tp").value(l.tp).key("pp").value(l.pp).key("cp").value(l.cp).key("zero").value(l.zero);
  j.key("schedule").value(l.schedule).key("virtual_stages").value(l.virtual_stages);
  j.key("microbatches").value(l.microbatches).key("precision").value(word(l.precision));
  j.key("sequence_parallel").value(l.sequence_parallel).key("world_size").value(l.world());
  j.key("recompute").value(word(l.recompute)).key("recompute_every").value(l.recompute_every);
  j.key("stage_layers").values(p.stage_layers);
  j.end();
  j.key("step_ms").value(p.step_s * 1e3).key("tokens_per_s").value(p.tokens_per_s);
  j.key("bubble").value(p.bubble).key("exposed_comm_ms").value(p.exposed_comm_s * 1e3);
  j.key("compute_ms").value(p.compute_s * 1e3).key("mfu").value(p.mfu);
  j.key("memory_bytes").values(p.memory_per_rank());
  j.key("memory_per_stage").begin_array();
  for (size_t s = 0; s < p.stage_memory.size(); ++s) {
    const RankMemory& m = p.stage_memory[s];
    j.begin_object().key("params").value(m.params).key("grads").value(m.grads).key("optimizer").value(m.optimizer);
    j.key("activations").value(m.activations).key("workspace").value(m.workspace).key("total").value(m.total());
    j.key("peak_in_flight").value(p.peak_in_flight[s]).end();
  }
  j.end();
  j.key("stage_end_ms").begin_array();
  for (double t : p.stage_end) j.value(t * 1e3);
  j.end();
  j.key("hardware").value(cm.hardware().file);
  j.key("devices_per_node").value(cm.hardware().devices_per_node);
  j.key("calibration").value(cal ? cal->path : std::string());
  j.end();
  std::printf("%s\n", j.str().c_str());
}
}  // namespace

Run add_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* c = app.add_subcommand("simulate", "Predict one training step's time and memory of a configuration's layout");
  c->add_option("config", a->config, "TOML input deck (the model, batch and parallel layout to predict)");
  c->add_option("--set", a->sets, "Override a deck value: section.key=value (repeatable)");
  c->add_option("--calibrate", a->calibrate,
                "HDF5 trace of the same model shape on this hardware (best: one rank, --set trace.units=true) "
                "whose per-op times the model scales; without it: the hardware's peak x efficiency");
  c->add_option("--hardware", a->hardware, "Hardware file (inputs/hardware/*.toml); default: this development box's, " +
                                               default_hardware());
  c->add_option("--ranks", a->ranks,
                "Ranks the run would have (as mpiexec -n); when it differs from dp x pp x tp, dp becomes "
                "ranks / (pp x tp)")
      ->check(positive_count());
  c->add_option("--precision", a->precision,
                "fp32 (the trainer's; TF32 tensor cores where the hardware has them) or bf16 (2-byte activations and "
                "communication at the hardware's bf16 peak)")
      ->transform(word_choices({Precision::fp32, Precision::bf16}));
  c->add_flag("--json", a->json, "Print one JSON object (step_ms, tokens_per_s, bubble, memory_bytes per rank, ...)");
  c->add_flag("--measure-comm", a->measure,
              "Measure this machine's point-to-point and collective times (run under mpiexec -n 2) and print "
              "hardware-file lines");
  c->add_option("--batch", a->batch,
                 "Predict every line of this file (\"-\": standard input) -- key=value words: id, hardware, precision, "
                 "ranks, section.key overrides of CONFIG -- one JSON line each (src/app/simulate_batch.cpp)");
  c->add_flag("--print-schedule", a->print_schedule,
              "Print the deck's pipeline schedule as a schedule file (each rank's F, B, W passes), to edit and run "
              "with parallel.schedule_file");
  c->footer("Example:\n  gpt2 train inputs/x.toml --set trace.file=cal.h5 --set trace.units=true\n"
            "  gpt2 simulate inputs/x.toml --set parallel.pp=2 --set parallel.microbatches=8 --calibrate cal.h5\n"
            "  gpt2 simulate inputs/x.toml --set parallel.pp=2 --set parallel.schedule=zb-v --print-schedule > my.sched");
  return [a]() -> int {
    if (a->measure) return measure_comm();
    if (a->config.empty()) fail_input("gpt2 simulate", "expected an input deck (CONFIG), or --measure-comm");
    if (!a->batch.empty()) return simulate_batch(a->config, a->batch, a->hardware, a->precision);
    RunConfig cfg = RunConfig::load(a->config, a->sets);
    std::string dp_note;
    const long long pt = (long long)cfg.parallel.pp * cfg.parallel.tp;
    if (a->ranks > 0 && a->ranks != cfg.grid().world()) {
      if (a->ranks % pt)
        fail_input("--ranks", a->ranks, " ranks do not hold whole pipelines of parallel.pp x parallel.tp = ", pt, " ranks");
      cfg.parallel.dp = int(a->ranks / pt);
      dp_note = ", dp from --ranks";
    }
    cfg.validate(int(cfg.grid().world()));
    if (a->print_schedule) return print_schedule(cfg);
    Hardware hw = Hardware::load(a->hardware.empty() ? default_hardware() : a->hardware);
    std::unique_ptr<Calibration> cal;
    if (!a->calibrate.empty()) {
      cal = std::make_unique<Calibration>(Calibration::load(a->calibrate));
      cal->require_shape(cfg.model, cfg.data.seq_len, a->config);
      const std::string node_note = cal->apply_node_size(hw);  // the traced run's ranks per host
      if (!node_note.empty() && !a->json) std::printf("%s\n", node_note.c_str());
    }
    const Workload w = cfg.workload();
    Layout l = cfg.layout();
    l.precision = a->precision;
    if (!hw.supports(l.precision)) fail_input("--precision", hw.file, " gives no peak for ", word(l.precision));
    const CostModel cm(w, hw, cal.get());
    const StepPrediction p = predict_step(cm, l);
    if (!p.valid()) fail_input(a->config, "this layout cannot run: ", p.problem);
    if (a->json) print_json(p, cm, cal.get());
    else print_text(p, *a, cm, cal.get(), dp_note);
    return 0;
  };
}

}  // namespace gpt2::app
