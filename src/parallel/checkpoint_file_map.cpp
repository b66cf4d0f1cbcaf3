#include "parallel/checkpoint_file_map.hpp"

#include <algorithm>

#include "formats/checkpoint_h5.hpp"

namespace gpt2 {

CheckpointFileMap::CheckpointFileMap(const ModelConfig& model, const StageLayout& layout, bool replica_0, int tp_size)
    : global_(ParamLayout(model).tensors()), replica_0_(replica_0) {
  local_.assign(global_.size(), nullptr);
  for (const TensorInfo& t : layout.tensors()) {
    if (t.range.begin < layout.tied_size()) continue;      // the tied copy of wte: stage 0 writes wte
    if (t.replicated && layout.tp().rank != 0) continue;  // tp rank 0 writes those
    for (size_t i = 0; i < global_.size(); ++i)
      if (global_[i].name() == t.name()) local_[i] = &t;
  }
  for (const TensorInfo& t : global_) {
    size_t n = 1;
    for (size_t d : stored_shape(t, model)) n *= d;
    stored_.push_back(n);
  }
  joinable_.assign(global_.size(), 0);
  joiner_.assign(global_.size(), 0);
  std::vector<size_t> load(size_t(tp_size), 0);
  for (size_t i = 0; i < global_.size(); ++i) {
    joinable_[i] = tp_size > 1 && local_[i] && local_[i]->global.count > 1;
    if (!joinable_[i]) continue;
    joiner_[i] = int(std::min_element(load.begin(), load.end()) - load.begin());
    load[size_t(joiner_[i])] += stored_[i];
  }
}

// The parts of each local tensor this rank holds (its ranges, their values at mine.at), each mapped through
// the tensor's GlobalMap (count runs of len, stride apart) to flat ranges of the global tensor, which
// is a contiguous row-major dataset: a flat range is a run of bytes in the file.
std::vector<CheckpointFileMap::Piece> CheckpointFileMap::pieces(size_t section, const ParamStore::Owned& mine,
                                                                bool joinable) const {
  std::vector<Piece> out;
  if (!mine.sharded && !replica_0_) return out;  // another dp replica writes whole state
  for (size_t ti = 0; ti < global_.size(); ++ti) {
    const TensorInfo* part = local_[ti];
    if (!part || bool(joinable_[ti]) != joinable) continue;
    const GlobalMap& gm = part->global;
    const size_t dataset = section * global_.size() + ti;
    for (size_t k = 0; k < mine.ranges.size(); ++k) {
      const Range& r = mine.ranges[k];
      const size_t lo = std::max(r.begin, part->range.begin), hi = std::min(r.end, part->range.end);
      for (size_t i = lo; i < hi;) {  // local element index i - part->range.begin
        const size_t e = i - part->range.begin, run = e / gm.len, in_run = e % gm.len;
        const size_t value = mine.at[k] + (i - r.begin);
        const size_t n = std::min(gm.len - in_run, hi - i);
        const uint64_t element = gm.begin + run * gm.stride + in_run - global_[ti].range.begin;
        i += n;
        if (element >= stored_[ti]) continue;  // wte's padded rows (zero) are not stored
        Piece p{offsets_[dataset] + element * 4, value, std::min<size_t>(n, stored_[ti] - element), dataset, element};
        Piece* last = out.empty() ? nullptr : &out.back();
        if (last && last->dataset == dataset && last->offset + last->count * 4 == p.offset &&
            last->value + last->count == value)
          last->count += p.count;
        else
          out.push_back(p);
      }
    }
  }
  sort_by_offset(out);
  return out;
}

void sort_by_offset(std::vector<CheckpointFileMap::Piece>& ps) {
  std::sort(ps.begin(), ps.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
}

}  // namespace gpt2
