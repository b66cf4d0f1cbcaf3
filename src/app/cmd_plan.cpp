// gpt2 plan MODEL_CONFIG --hardware FILE --gpus N [--global-batch B] [--calibrate TRACE] [--top K] [--json]:
// ranks every layout of the model on N devices by predicted tokens/s (src/perf/planner).
#include <chrono>
#include <cstdio>
#include <memory>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "perf/planner.hpp"
#include "train/run_config.hpp"

namespace gpt2::app {

namespace {
struct PlanArgs {
  std::string config, hardware, calibrate;
  std::vector<std::string> sets;
  long long gpus = 0, batch = 0;
  int top = 10;
  bool json = false, all = false;
};

double gib(double b) { return b / 1073741824.0; }

void json_prediction(Json& j, const StepPrediction& p, int fits = -1) {
  const Layout& l = p.layout;
  j.begin_object();
  if (fits >= 0) j.key("fits").value(fits == 1);
  j.key("dp").value(l.dp).key("tp").value(l.tp).key("pp").value(l.pp).key("cp").value(l.cp).key("zero").value(l.zero);
  j.key("schedule").value(l.schedule).key("virtual_stages").value(l.virtual_stages);
  j.key("microbatches").value(l.microbatches).key("precision").value(word(l.precision));
  j.key("sequence_parallel").value(l.sequence_parallel).key("stage_layers").values(p.stage_layers);
  j.key("recompute").value(word(l.recompute)).key("recompute_every").value(l.recompute_every);
  j.key("step_ms").value(p.step_s * 1e3).key("tokens_per_s").value(p.tokens_per_s).key("mfu").value(p.mfu);
  j.key("bubble").value(p.bubble).key("exposed_comm_ms").value(p.exposed_comm_s * 1e3);
  j.key("exposed_comm_known").value(p.exposed_comm_known);
  j.key("compute_ms").value(p.compute_s * 1e3).key("peak_memory_bytes").value(p.peak_memory());
  j.end();
}

void print_row(int rank, const StepPrediction& p) {
  std::printf("%4d  %-46s %9.2f %11.0f %5.1f%% %7.3f %8.2f %5.1f%% %8.2f\n", rank, p.layout.describe().c_str(),
              p.step_s * 1e3, p.tokens_per_s, 100 * p.mfu, p.bubble, p.exposed_comm_s * 1e3,
              100 * p.exposed_comm_s / p.step_s, gib(p.peak_memory()));
}

// The fastest layout of a kind, for comparing the best with.
StepPrediction* best_where(Plan& plan, const std::function<bool(const Layout&)>& pred) {
  for (StepPrediction& p : plan.ranked)
    if (pred(p.layout)) return &p;
  return nullptr;
}

void explain(Plan& plan, const CostModel& cm) {
  const Hardware& hw = cm.hardware();
  const StepPrediction& b = plan.ranked.front();
  const Layout& l = b.layout;
  std::printf("\nbest: %s\n", l.describe().c_str());
  std::printf("  %.0f tokens/s, step %.2f ms, MFU %.1f%% of %.0f TFLOP/s %s per device\n", b.tokens_per_s, b.step_s * 1e3,
              100 * b.mfu, hw.peak(l.precision) * 1e-12, word(l.precision));
  std::printf("  compute %.2f ms on the busiest stage; bubble %.3f%s; exposed communication %.2f ms (%.1f%% of the step)\n",
              b.compute_s * 1e3, b.bubble, l.pp > 1 ? "" : " (no pipeline)", b.exposed_comm_s * 1e3,
              100 * b.exposed_comm_s / b.step_s);
  const RankMemory* full = &b.stage_memory[0];
  for (const RankMemory& m : b.stage_memory)
    if (m.total() > full->total()) full = &m;
  std::printf("  memory %.2f GiB of %.1f GiB on the fullest rank (params %.2f, grads %.2f, optimizer %.2f, activations %.2f, workspace %.2f)\n",
              gib(full->total()), gib(hw.memory_bytes), gib(full->params), gib(full->grads), gib(full->optimizer),
              gib(full->activations), gib(full->workspace));
  struct Alt {
    const char* what;
    std::function<bool(const Layout&)> pred;
  };
  const std::vector<Alt> alts = {
      {"data parallel only (tp 1, pp 1)", [](const Layout& x) { return x.tp == 1 && x.pp == 1; }},
      {"without tensor parallelism", [](const Layout& x) { return x.tp == 1; }},
      {"with tensor parallelism", [](const Layout& x) { return x.tp > 1; }},
      {"with a pipeline", [](const Layout& x) { return x.pp > 1; }},
      {"without ZeRO", [](const Layout& x) { return x.zero == 0; }},
      {"other precision", [&](const Layout& x) { return x.precision != l.precision; }},
      {"with context parallelism", [](const Layout& x) { return x.cp > 1; }},
      {"other recomputation", [&](const Layout& x) { return x.recompute != l.recompute; }},
  };
  std::printf("  against the best of each other kind:\n");
  for (const Alt& a : alts) {
    StepPrediction* p = best_where(plan, a.pred);
    if (!p || p == &b) continue;
    add_exposed_comm(cm, *p);
    std::printf("    %-34s %-46s %5.2fx slower (bubble %.3f, exposed comm %.1f%%, %.2f GiB)\n", a.what,
                p->layout.describe().c_str(), b.tokens_per_s / p->tokens_per_s, p->bubble,
                100 * p->exposed_comm_s / p->step_s, gib(p->peak_memory()));
  }
}

// What a plan is made from: the deck's model, the hardware (its node size the traced run's where a
// calibration trace gives one) and the calibration.
struct PlanInputs {
  RunConfig cfg;
  Hardware hw;
  std::unique_ptr<Calibration> cal;
  std::string node_note;
};

PlanInputs load_inputs(const PlanArgs& a) {
  PlanInputs in{RunConfig::load(a.config, a.sets), {}, nullptr, ""};
  const RunConfig& cfg = in.cfg;
  cfg.model.validate();
  if (cfg.data.seq_len < 1 || cfg.data.seq_len > cfg.model.block_size)
    fail_input("data.seq_len", "must be between 1 and model.block_size (", cfg.model.block_size, "), got ", cfg.data.seq_len);
  in.hw = Hardware::load(a.hardware);
  if (!a.calibrate.empty()) {
    in.cal = std::make_unique<Calibration>(Calibration::load(a.calibrate));
    in.cal->require_shape(cfg.model, cfg.data.seq_len, a.config);
    in.node_note = in.cal->apply_node_size(in.hw);  // the traced run's ranks per host
  }
  return in;
}

// --json: the plan's counts and its layouts (--all: those that do not fit too).
int print_json(const PlanArgs& a, const PlanInputs& in, const Workload& w, const PlanOptions& o, const Plan& plan,
               double seconds) {
  const size_t shown = std::min(plan.ranked.size(), size_t(a.top));
  Json j;
  j.begin_object();
  j.key("config").value(a.config).key("hardware").value(in.hw.file).key("calibration").value(in.cal ? in.cal->path : "");
  j.key("devices_per_node").value(in.hw.devices_per_node);
  j.key("gpus").value(a.gpus).key("global_batch").value((long long)w.batch).key("seq_len").value(w.seq_len);
  j.key("considered").value((unsigned long long)plan.considered).key("fitting").value((unsigned long long)plan.ranked.size());
  j.key("too_big").value((unsigned long long)plan.too_big).key("invalid").value((unsigned long long)plan.invalid);
  j.key("seconds").value(seconds).key("usable_memory_bytes").value(o.usable_memory * in.hw.memory_bytes);
  j.key("layouts").begin_array();
  for (size_t i = 0; i < (a.all ? plan.ranked.size() : shown); ++i) json_prediction(j, plan.ranked[i], a.all ? 1 : -1);
  if (a.all)
    for (const StepPrediction& p : plan.too_big_layouts) json_prediction(j, p, 0);
  j.end().end();
  std::printf("%s\n", j.str().c_str());
  return plan.ranked.empty() ? 1 : 0;
}

// The text's head: what was planned, where the costs come from, how many layouts were considered.
void print_header(const PlanArgs& a, const PlanInputs& in, const Workload& w, const PlanOptions& o, const Plan& plan,
                  double seconds) {
  const Hardware& hw = in.hw;
  std::printf("plan: %s, T %d, global batch %lld sequences (%lld tokens) on %lld x %s (%s)\n",
              w.model.describe().c_str(), w.seq_len, (long long)w.batch, (long long)w.batch * w.seq_len, a.gpus,
              hw.name.c_str(), hw.file.c_str());
  if (in.cal) std::printf("costs: calibrated from %s\n", in.cal->path.c_str());
  else if (hw.multiprocessors > 0)
    std::printf("costs: uncalibrated: GEMMs by shape (tiles in waves over %d multiprocessors, up to %.0f%% of peak), "
                "%.0f%% of memory bandwidth for the rest\n",
                hw.multiprocessors, 100 * hw.gemm_efficiency, 100 * hw.memory_efficiency);
  else std::printf("costs: uncalibrated: %.0f%% of peak for GEMMs, %.0f%% of memory bandwidth for the rest\n",
                   100 * hw.gemm_efficiency, 100 * hw.memory_efficiency);
  if (!in.node_note.empty()) std::printf("%s\n", in.node_note.c_str());
  std::printf("%zu layouts: %zu fit in %.0f%% of %.1f GiB, %zu do not, %zu invalid; %.2f s\n\n", plan.considered,
              plan.ranked.size(), 100 * o.usable_memory, gib(hw.memory_bytes), plan.too_big, plan.invalid, seconds);
}

// The text: the head, then the ranked layouts and the best one explained (or why none fits).
int print_text(const PlanArgs& a, const PlanInputs& in, const Workload& w, const PlanOptions& o, Plan& plan,
               const CostModel& cm, double seconds) {
  print_header(a, in, w, o, plan, seconds);
  if (plan.ranked.empty()) {
    std::printf("no layout fits");
    if (plan.too_big) std::printf(": the smallest (%s) needs %.2f GiB", plan.smallest_too_big.layout.describe().c_str(),
                                  gib(plan.smallest_too_big.peak_memory()));
    std::printf("\n");
    return 1;
  }
  std::printf("rank  %-46s %9s %11s %6s %7s %8s %6s %8s\n", "layout", "step ms", "tokens/s", "MFU", "bubble",
              "comm ms", "comm%", "mem GiB");
  const size_t shown = std::min(plan.ranked.size(), size_t(a.top));
  for (size_t i = 0; i < shown; ++i) print_row(int(i + 1), plan.ranked[i]);
  explain(plan, cm);
  return 0;
}

int run_plan(const PlanArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const PlanInputs in = load_inputs(a);
  const RunConfig& cfg = in.cfg;
  const Workload w{cfg.model, cfg.data.seq_len, a.batch > 0 ? a.batch : std::max<long long>(1, (1 << 19) / cfg.data.seq_len)};
  const CostModel cm(w, in.hw, in.cal.get());
  PlanOptions o;
  o.devices = a.gpus;
  o.detailed = size_t(a.top);
  o.predict_too_big = a.all;
  Plan plan = plan_layouts(cm, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json) return print_json(a, in, w, o, plan, seconds);
  return print_text(a, in, w, o, plan, cm, seconds);
}
}  // namespace

Run add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand("plan", "Rank the layouts (dp x tp x pp, ZeRO, schedule, microbatches, precision) of a model on N devices");
  c->add_option("config", a->config, "TOML input deck whose [model] and data.seq_len to plan for")->required();
  c->add_option("--set", a->sets, "Override a deck value: section.key=value (repeatable)");
  c->add_option("--hardware", a->hardware, "Hardware file (inputs/hardware/*.toml)")->required();
  c->add_option("--gpus", a->gpus, "Devices (ranks) to plan for")->required()->check(positive_count());
  c->add_option("--global-batch", a->batch,
                "Sequences per optimizer step; default: 2^19 tokens (0.5M, GPT-3's batch for its 125M model) / data.seq_len")
      ->check(positive_count());
  c->add_option("--calibrate", a->calibrate,
                "HDF5 trace of the same model shape recorded on this hardware (see gpt2 simulate); without it: the "
                "hardware's peak x gemm_efficiency");
  c->add_option("--top", a->top, "Layouts to list")->check(positive_count());
  c->add_flag("--json", a->json, "Print one JSON object (the ranked layouts and the counts)");
  c->add_flag("--all", a->all,
              "With --json: every layout, the ones that do not fit predicted too (\"fits\": false), for "
              "analysis/plot_plan.py; slower");
  c->footer("Example:\n  gpt2 plan inputs/gpt2-124M.toml --hardware inputs/hardware/h100.toml --gpus 1024");
  return [a]() -> int { return run_plan(*a); };
}

}  // namespace gpt2::app
