// The one set of layout rules: what a grid, schedule, ZeRO level and batch need of the model. The
// deck's validation (RunConfig::validate) reports a problem under its key; the planner and `gpt2
// simulate` skip or refuse the layout with its message.
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "perf/rank_pipeline.hpp"
#include "perf/step_model.hpp"
#include "parallel/zero.hpp"

namespace gpt2 {

namespace {
template <class... A>
LayoutProblem problem(const char* key, const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return {key, os.str()};
}

// "interleaved, interleaved-zb": the schedules that take parallel.virtual_stages.
// A kernel indexes within one tensor with products of its extents held in 32-bit ints: a layout
// whose microbatch makes a larger tensor is refused (more microbatches, tp or cp make them smaller).
constexpr int64_t kMaxTensorElements = (int64_t(1) << 31) - 1;

LayoutProblem tensor_size_problem(const ModelConfig& m, const Layout& l, int64_t sequences, int seq_len) {
  const int64_t rows = sequences * (seq_len / l.cp), heads = m.n_head / l.tp;
  const struct {
    const char* what;
    int64_t elements;
  } largest[] = {
      {"logits (rows x padded vocabulary / tp)", rows * (m.padded_vocab() / l.tp)},
      {"attention probabilities (sequences x heads / tp x seq_len^2)",
       l.cp == 1 ? sequences * heads * int64_t(seq_len) * seq_len : 0},
      {"MLP activations (rows x 4 n_embd / tp)", rows * 4 * m.n_embd / l.tp},
  };
  for (const auto& t : largest)
    if (t.elements > kMaxTensorElements)
      return problem("parallel.microbatches", "a microbatch of ", sequences, " sequences makes ", t.what, " of ",
                     t.elements, " elements, more than the 2^31 - 1 a kernel indexes: use more microbatches (or tp, cp)");
  return {};
}

std::string chunked_schedules() {
  std::string out;
  for (const ScheduleEntry& e : ScheduleRegistry::entries())
    if (e.chunks == 0 && e.file.empty()) out += (out.empty() ? "" : ", ") + e.name;
  return out;
}

LayoutProblem schedule_problem(const Workload& w, const Layout& l, const ScheduleEntry& e) {
  const int chunks = schedule_chunks(e, l.virtual_stages), stages = l.pp * chunks;
  if (l.virtual_stages > 1 && e.chunks != 0)
    return problem("parallel.virtual_stages", "is for the schedules whose chunks per rank you choose (",
                   chunked_schedules(), "); ", l.schedule,
                   e.chunks > 1 ? " always runs " + std::to_string(e.chunks) + " chunks per rank" : " runs one chunk per rank",
                   ": leave it at 1");
  if (chunks > 1) {
    if (w.model.n_layer % stages != 0)
      return problem(e.chunks == 0 ? "parallel.virtual_stages" : "parallel.schedule", l.schedule, " splits the blocks into ",
                     chunks, " chunks per rank x parallel.pp = ", stages, " virtual stages, which must divide model.n_layer (",
                     w.model.n_layer, ")");
    if (!l.stage_layers.empty())
      return problem("parallel.stage_layers", "applies to one chunk per rank; ", l.schedule,
                     " splits the blocks evenly into its chunks");
  }
  if (l.microbatches < e.min_microbatches_per_stage * l.pp)
    return problem("parallel.microbatches", "the ", l.schedule, " schedule needs at least ", e.min_microbatches_per_stage,
                   " x parallel.pp = ", e.min_microbatches_per_stage * l.pp, " microbatches, got ", l.microbatches);
  if (e.microbatches_multiple_of_stages && l.microbatches % l.pp != 0)
    return problem("parallel.microbatches", "the ", l.schedule, " schedule runs microbatches in groups of parallel.pp (",
                   l.pp, "): need a multiple of it, got ", l.microbatches);
  if (!e.file.empty() && (l.pp != e.stages || l.microbatches != e.microbatches))
    return problem("parallel.schedule_file", e.file, " is written for ", e.stages, " pipeline ranks and ", e.microbatches,
                   " microbatches (its rank lines, its largest microbatch + 1); the deck has parallel.pp = ", l.pp,
                   " and parallel.microbatches = ", l.microbatches);
  return {};
}
}  // namespace

LayoutProblem layout_problem(const Workload& w, const Layout& l) {
  const ModelConfig& m = w.model;
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.cp < 1 || l.microbatches < 1)
    return problem("parallel", "dp, tp, pp, cp and microbatches must be >= 1");
  if (!is_zero_level(l.zero)) return problem("parallel.zero", "expected ", zero_level_choices(), ", got ", l.zero);
  const ScheduleEntry* sched = ScheduleRegistry::find(l.schedule);
  if (!sched) return problem("parallel.schedule", "expected ", ScheduleRegistry::choices(), ", got ", l.schedule);
  if (l.pp > m.n_layer)
    return problem("parallel.pp", "more pipeline stages (", l.pp, ") than model.n_layer (", m.n_layer,
                   "): every stage needs at least one block");
  if (!l.stage_layers.empty()) {
    if (int(l.stage_layers.size()) != l.pp)
      return problem("parallel.stage_layers", "expected ", l.pp, " entries (one per stage), got ", l.stage_layers.size());
    int64_t sum = 0;  // (an int could overflow on absurd entries)
    for (int n : l.stage_layers) {
      if (n <= 0) return problem("parallel.stage_layers", "every stage needs at least one block, got ", n);
      sum += n;
    }
    if (sum != m.n_layer)
      return problem("parallel.stage_layers", "entries must sum to model.n_layer (", m.n_layer, "), got ", sum);
  }
  if (LayoutProblem p = schedule_problem(w, l, *sched)) return p;
  const int64_t per_rank = int64_t(l.dp) * l.microbatches;
  if (w.batch % per_rank != 0)
    return problem("train.batch_size", "must be divisible by parallel.dp * parallel.microbatches (", l.dp, " * ",
                   l.microbatches, " = ", per_rank, "), got ", w.batch);
  if (l.tp > 1) {
    if (m.n_head % l.tp != 0)
      return problem("parallel.tp", "must divide model.n_head (", m.n_head, ") so that every rank holds whole heads, got ",
                     l.tp);
    if (m.padded_vocab() % l.tp != 0)
      return problem("parallel.tp", "must divide the padded vocabulary (", m.padded_vocab(),
                     " = model.vocab_size rounded up to a multiple of 128), got ", l.tp);
  }
  if (l.cp > 1) {
    if (w.seq_len % (2 * l.cp) != 0)
      return problem("parallel.cp", "cuts each sequence into 2 * parallel.cp = ", 2 * l.cp,
                     " chunks (rank i holds chunks i and 2cp-1-i): data.seq_len (", w.seq_len, ") must be divisible by ",
                     2 * l.cp);
    if (l.recompute == Recompute::selective)
      return problem("train.recompute", "selective drops attention's probabilities, which ring attention (parallel.cp > 1) ",
                     "never keeps: use none or full");
  }
  if (l.sequence_parallel && l.tp > 1) {
    const int64_t tokens = w.batch / per_rank * w.seq_len / l.cp;
    if (tokens % l.tp != 0)
      return problem("parallel.sequence_parallel", "needs a microbatch's tokens (", tokens, ") divisible by parallel.tp (",
                     l.tp, ")");
  }
  if (LayoutProblem p = tensor_size_problem(m, l, w.batch / per_rank, w.seq_len)) return p;
  // (ZeRO over replicas that divide no unit: the engine pads each unit to a multiple of them.)
  return {};
}

std::string check_layout(const Workload& w, const Layout& l) {
  const LayoutProblem p = layout_problem(w, l);
  return p ? p.key + ": " + p.message : "";
}

}  // namespace gpt2
