// The step model's memory side (perf/step_model.hpp): what each rank holds at rest and at its peak,
// as ParamStore::memory() and the trainer's activation slots count it.
#include <algorithm>
#include <string>

#include "model/activation_sizes.hpp"
#include "model/stage_layout.hpp"
#include "parallel/zero.hpp"
#include "perf/rank_pipeline.hpp"
#include "perf/step_model.hpp"
#include "runtime/topology.hpp"

namespace gpt2 {

namespace {
// One microbatch's saved activations of a chunk of blocks and its Stage's scratch, in bytes: the
// size table the Stage allocates by (model/activation_sizes), fp32 values and 16-bit GEMM inputs.
// shared: the part of the scratch recomputed blocks share, which the trainer counts as activations.
void activation_memory(const Workload& w, const Layout& l, const BlockRange& chunk, int local_vocab, bool split,
                       int b, double& per_mb, double& scratch, double& shared) {
  ActivationShape s;
  s.B = b, s.seq_len = w.seq_len / l.cp, s.n_embd = w.model.n_embd, s.n_head = w.model.n_head, s.tp = l.tp;
  s.cp = l.cp, s.fused_attention = l.fused_attention;
  s.blocks = chunk.end - chunk.first;
  s.first = chunk.first == 0, s.last = chunk.end == w.model.n_layer;
  s.sequence_parallel = l.sequence_parallel, s.split = split, s.mixed = l.precision != Precision::fp32;
  s.local_vocab = local_vocab, s.loss_rows = l.loss_chunk_rows;
  s.first_block = chunk.first;
  s.recompute = l.recompute;
  s.recompute_every = l.recompute_every;
  const ActivationSizes sizes = activation_sizes(s);
  s.recompute = Recompute::none;
  const ActivationSizes kept = activation_sizes(s);
  per_mb = sizes.bytes(4);
  shared = sizes.scratch_bytes(4) - kept.scratch_bytes(4);
  scratch = sizes.scratch_bytes(4) - shared;
}
}  // namespace

double StepPrediction::peak_memory() const {
  double m = 0;
  for (const RankMemory& r : stage_memory) m = std::max(m, r.total());
  return m;
}

std::vector<double> StepPrediction::memory_per_rank() const {
  const GridShape g{layout.dp, layout.pp, 1, layout.tp};
  std::vector<double> out;
  if (stage_memory.empty()) return out;
  for (long long r = 0; r < g.world(); ++r)
    out.push_back(stage_memory[size_t(Topology::coords_of(g, int(r)).pp)].total());
  return out;
}

namespace {
// What predict_memory needs of a pipeline rank whatever its ZeRO level and microbatches in flight.
struct RankShape {
  double psi = 0, largest = 0, slot = 0, scratch = 0, shared = 0;
};

// Every rank's, remembered for the last layout asked: a plan asks again for each ZeRO level and
// once more with the simulated microbatches in flight.
const std::vector<RankShape>& rank_shapes(const Workload& w, const Layout& l) {
  static std::string last_key;
  static std::vector<RankShape> last;
  const ModelConfig& m = w.model;
  std::string key = l.pass_key();
  for (long long v : {(long long)m.n_layer, (long long)m.n_head, (long long)m.n_embd, (long long)m.vocab_size,
                      (long long)m.block_size, (long long)w.seq_len, (long long)w.batch})
    key += std::to_string(v) + ',';
  if (key == last_key) return last;
  last.clear();
  const Pipeline pipe = pipeline_of(w, l);
  const int b = int(w.batch / l.dp / l.microbatches);
  for (int r = 0; r < l.pp; ++r) {
    const std::vector<BlockRange> chunks = pipe.chunks_of(r);
    const StageLayout& sl = rank_layout(w.model, chunks, l.tp);
    RankShape rs;
    rs.psi = double(sl.local_size());
    for (const Unit& u : sl.units()) rs.largest = std::max(rs.largest, double(u.range.size()));
    // The executor's slots hold the largest chunk's activations; every chunk's Stage has scratch.
    for (const BlockRange& c : chunks) {
      double per_mb = 0, sc = 0, sh = 0;
      activation_memory(w, l, c, sl.local_vocab(), pipe.split_backward, b, per_mb, sc, sh);
      rs.slot = std::max(rs.slot, per_mb), rs.scratch += sc, rs.shared += sh;
    }
    last.push_back(rs);
  }
  last_key = key;
  return last;
}
}  // namespace

std::vector<RankMemory> predict_memory(const Workload& w, const Layout& l, const std::vector<int>& in_flight) {
  const ShardPolicy policy = zero_policy(l.zero);
  const std::vector<RankShape>& shapes = rank_shapes(w, l);
  std::vector<RankMemory> out;
  for (int r = 0; r < l.pp; ++r) {
    const RankShape& rs = shapes[size_t(r)];
    const double psi = rs.psi, shard = policy.optimizer ? psi / (l.dp * l.cp) : psi;
    // As ParamStore::memory() counts it: the trainer keeps fp32 masters and gradients in every
    // precision, and under bf16 / fp16 16-bit working copies: of the whole parameters where it keeps
    // them whole (ZeRO 0-2), and of the shard (ZeRO 1-3; the gather's small tables left out).
    const bool mixed = l.precision != Precision::fp32;
    RankMemory m;
    m.params = 4 * ((policy.params ? 0 : psi) + (policy.optimizer ? shard : 0)) +
               (mixed ? 2 * ((policy.params ? 0 : psi) + (policy.optimizer ? shard : 0)) : 0);
    m.grads = 4 * ((policy.grads ? 0 : psi) + (policy.optimizer ? shard : 0));
    m.optimizer = 8 * shard;
    m.activations = rs.slot * in_flight[size_t(r)] + rs.shared;
    // ZeRO's pooled workspaces: about two units' gradients (2, 3) and two gathered units (3; with
    // their 16-bit matrices under mixed precision).
    m.workspace = rs.scratch + rs.largest * ((policy.grads ? 8 : 0) + (policy.params ? (mixed ? 12 : 8) : 0));
    out.push_back(m);
  }
  return out;
}

}  // namespace gpt2
