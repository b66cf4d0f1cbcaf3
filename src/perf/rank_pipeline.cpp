#include "perf/rank_pipeline.hpp"

#include <map>
#include <memory>
#include <tuple>

#include "model/param_layout.hpp"

namespace gpt2 {

namespace {
using ModelKey = std::tuple<int, int, int, int, int>;
ModelKey model_key(const ModelConfig& m) { return {m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.block_size}; }
}  // namespace

const StageLayout& rank_layout(const ModelConfig& m, const std::vector<BlockRange>& chunks, int tp) {
  static std::map<ModelKey, std::unique_ptr<ParamLayout>> models;
  static std::map<std::tuple<ModelKey, std::vector<std::pair<int, int>>, int>, std::unique_ptr<StageLayout>> ranks;
  auto& g = models[model_key(m)];
  if (!g) g = std::make_unique<ParamLayout>(m);
  std::vector<std::pair<int, int>> key;
  for (const BlockRange& c : chunks) key.push_back({c.first, c.end});
  auto& sl = ranks[{model_key(m), key, tp}];
  if (!sl) sl = std::make_unique<StageLayout>(*g, chunks, TpSplit{tp, 0});
  return *sl;
}

Pipeline pipeline_of(const Workload& w, const Layout& l) {
  // Remembered for the last (model, schedule, ranks, chunks, split) asked: a plan asks for the same
  // pipeline for many layouts in a row.
  static std::vector<int> last_key;
  static Pipeline last;
  std::vector<int> key = {w.model.n_layer, w.model.n_embd, w.model.n_head, w.model.padded_vocab(), w.seq_len, l.pp,
                          l.virtual_stages};
  key.insert(key.end(), l.stage_layers.begin(), l.stage_layers.end());
  for (char c : l.schedule) key.push_back(c);
  if (key == last_key) return last;
  last = make_pipeline(w, l);
  last_key = key;
  return last;
}

Pipeline make_pipeline(const Workload& w, const Layout& l) {
  const ScheduleEntry& e = ScheduleRegistry::get(l.schedule, "parallel.schedule");
  Pipeline pl;
  pl.placement = schedule_placement(e, l.pp, l.virtual_stages);
  pl.split_backward = e.split_backward;
  pl.layers = pl.placement.chunks == 1 ? stage_layers_of(w, l)
                                       : std::vector<int>(size_t(pl.placement.stages()), w.model.n_layer / pl.placement.stages());
  for (size_t k = 0, f = 0; k < pl.layers.size(); f += size_t(pl.layers[k]), ++k) pl.first.push_back(int(f));
  return pl;
}

}  // namespace gpt2
