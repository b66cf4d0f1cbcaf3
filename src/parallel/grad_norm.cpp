#include "parallel/grad_norm.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gpt2 {

std::vector<std::pair<size_t, size_t>> counted_ranges(const StageLayout& layout, const ShardLayout& shards,
                                                      bool replicated_only, bool merge) {
  const bool tp_rank0 = layout.tp().rank == 0;
  std::vector<std::pair<size_t, size_t>> out;
  for (const TensorInfo& t : shards.shard_tensors()) {
    const bool take = replicated_only ? t.replicated && layout.tp().size > 1 : !t.replicated || tp_rank0;
    if (!take) continue;
    if (merge && !out.empty() && out.back().second == t.range.begin) out.back().second = t.range.end;
    else out.push_back({t.range.begin, t.range.end});
  }
  return out;
}

GradNorm::GradNorm(const StageLayout& layout, const ShardLayout& shards) {
  const size_t units = layout.units().size();
  const int tied = layout.unit_index(UnitKind::tied_wte);
  const size_t skip = tied >= 0 ? shards.shard_range(tied).end : 0;
  std::vector<std::pair<size_t, size_t>> counted;
  for (const auto& r : counted_ranges(layout, shards, false, false))
    if (r.second > skip) counted.push_back({std::max(r.first, skip), r.second});
  std::vector<std::pair<size_t, size_t>> cut;
  unit_chunks_.assign(units, {0, 0});
  for (size_t u = 0, at = 0, chunks = 0; u < units; ++u) {
    const Range ur = shards.shard_range(int(u));
    unit_chunks_[u].first = int64_t(chunks);
    for (; at < counted.size() && counted[at].first < ur.end; ++at) {
      const size_t b = std::max(counted[at].first, ur.begin), e = std::min(counted[at].second, ur.end);
      if (b < e) cut.push_back({b, e}), chunks += (e - b + 4095) / 4096;
      if (counted[at].second > ur.end) break;  // the rest belongs to the next unit
    }
    unit_chunks_[u].second = int64_t(chunks);
  }
  chunks_ = make_chunk_table(cut);
  if (chunks_.count != (unit_chunks_.empty() ? 0 : unit_chunks_.back().second))
    fail("GradNorm: the norm's chunks do not follow the units");
  summed_.assign(units, 0);
  deferred_.assign(units, 0);
  chunk_summed_.assign(size_t(chunks_.count), 0);
}

void GradNorm::begin_step() {
  std::fill(summed_.begin(), summed_.end(), 0);
  std::fill(chunk_summed_.begin(), chunk_summed_.end(), 0);
}

std::pair<int64_t, int64_t> GradNorm::chunks_in(int u, Range r) const {
  const auto& spans = chunks_.spans;
  const auto [lo, hi] = unit_chunks_[size_t(u)];
  int64_t first = std::lower_bound(spans.begin() + lo, spans.begin() + hi, int64_t(r.begin),
                                   [](const auto& s, int64_t at) { return s.first < at; }) -
                  spans.begin();
  int64_t last = first;
  while (last < hi && spans[size_t(last)].second <= int64_t(r.end)) ++last;
  return {first, last};
}

void GradNorm::region_final(int u, Range r, CVec<float> grads) {
  if (deferred_[size_t(u)] || summed_[size_t(u)]) return;
  const auto [first, last] = chunks_in(u, r);
  if (first == last) return;
  chunk_squares<float>(grads, chunks_, first, last);
  std::fill(chunk_summed_.begin() + first, chunk_summed_.begin() + last, 1);
}

void GradNorm::written_again(int u, Range r) {
  const auto& spans = chunks_.spans;
  for (int64_t c = unit_chunks_[size_t(u)].first; c < unit_chunks_[size_t(u)].second; ++c)
    if (spans[size_t(c)].first < int64_t(r.end) && int64_t(r.begin) < spans[size_t(c)].second) chunk_summed_[size_t(c)] = 0;
}

void GradNorm::sum(int u, CVec<float> grads) {
  // The chunks region_final left, in runs (what it summed holds its final values).
  const auto [lo, hi] = unit_chunks_[size_t(u)];
  for (int64_t c = lo; c < hi;) {
    if (chunk_summed_[size_t(c)]) {
      ++c;
      continue;
    }
    int64_t e = c;
    while (e < hi && !chunk_summed_[size_t(e)]) ++e;
    chunk_squares<float>(grads, chunks_, c, e);
    c = e;
  }
  summed_[size_t(u)] = 1;
}

void GradNorm::unit_final(int u, CVec<float> grads) {
  if (!deferred_[size_t(u)]) sum(u, grads);
}

void GradNorm::defer(int u) {
  summed_[size_t(u)] = 0, deferred_[size_t(u)] = 1;
  written_again(u, Range{0, ~size_t(0)});  // all of u again, at the end
}

void GradNorm::total(CVec<float> grads, DeviceScalar out) {
  for (size_t u = 0; u < summed_.size(); ++u)
    if (!summed_[u]) sum(int(u), grads);
  chunk_total(chunks_, out);
}

}  // namespace gpt2
