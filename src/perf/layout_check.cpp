#include <string>

#include "perf/rank_pipeline.hpp"
#include "perf/step_model.hpp"
#include "runtime/sharding.hpp"

namespace gpt2 {

std::string check_layout(const Workload& w, const Layout& l) {
  const ModelConfig& m = w.model;
  if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.microbatches < 1) return "dp, tp, pp and microbatches must be >= 1";
  if (l.precision != "fp32" && l.precision != "bf16") return "precision must be fp32 or bf16, got " + l.precision;
  const ScheduleEntry* sched = ScheduleRegistry::find(l.schedule);
  if (!sched) return "unknown schedule " + l.schedule + " (expected " + ScheduleRegistry::choices() + ")";
  // The schedule's demands, as RunConfig::validate_schedule states them.
  const int chunks = schedule_chunks(*sched, l.virtual_stages);
  if (l.virtual_stages < 1 || (l.virtual_stages > 1 && sched->chunks != 0))
    return "virtual_stages is for the interleaved schedule (" + l.schedule + " runs its own chunks)";
  if (chunks > 1 && (m.n_layer % (l.pp * chunks) || !l.stage_layers.empty()))
    return l.schedule + " splits the blocks evenly into pp x chunks = " + std::to_string(l.pp * chunks) + " virtual stages";
  if (sched->microbatches_multiple_of_stages && l.microbatches % l.pp)
    return l.schedule + " needs microbatches in groups of pp";
  if (sched->stages > 0 && (l.pp != sched->stages || l.microbatches != sched->microbatches))
    return l.schedule + " (from " + sched->file + ") is written for pp " + std::to_string(sched->stages) + " and " +
           std::to_string(sched->microbatches) + " microbatches";
  if (!ShardingRegistry::find(std::to_string(l.zero))) return "unknown ZeRO level " + std::to_string(l.zero);
  if (l.pp > m.n_layer) return "more stages (" + std::to_string(l.pp) + ") than blocks (" + std::to_string(m.n_layer) + ")";
  if (m.n_head % l.tp || m.padded_vocab() % l.tp) return "tp " + std::to_string(l.tp) + " does not divide the heads and the padded vocabulary";
  if (w.batch % (int64_t(l.dp) * l.microbatches))
    return "the batch of " + std::to_string(w.batch) + " sequences does not split into dp x microbatches = " +
           std::to_string(l.dp) + " x " + std::to_string(l.microbatches);
  if (l.sequence_parallel && (w.batch / l.dp / l.microbatches * w.seq_len) % l.tp)
    return "sequence parallelism needs a microbatch's tokens divisible by tp";
  if (!l.stage_layers.empty()) {
    if (int(l.stage_layers.size()) != l.pp) return "stage_layers must list one count per stage";
    int sum = 0;
    for (int n : l.stage_layers) {
      if (n < 1) return "every stage needs at least one block";
      sum += n;
    }
    if (sum != m.n_layer) return "stage_layers must add up to n_layer";
  }
  if (l.zero > 0 && l.dp > 1) {  // every unit (a block, wte, wpe, the final norm) splits evenly over dp
    const StageLayout& whole = rank_layout(m, {{0, m.n_layer}}, l.tp);
    for (const Unit& u : whole.units())
      if (u.range.size() % size_t(l.dp))
        return std::string("ZeRO needs every unit split evenly over dp ") + std::to_string(l.dp) + " (" + u.name() +
               " has " + std::to_string(u.range.size()) + " values)";
  }
  return "";
}

}  // namespace gpt2
