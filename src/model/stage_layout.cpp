#include "model/stage_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gpt2 {

const char* Unit::name() const {
  switch (kind) {
    case UnitKind::tied_wte: return "tied wte";
    case UnitKind::wte: return "wte";
    case UnitKind::wpe: return "wpe";
    case UnitKind::block: return "block";
    default: return "final norm";
  }
}

StageLayout::StageLayout(const ParamLayout& global, int first_layer, int end_layer)
    : global_(&global), first_(first_layer), end_(end_layer) {
  const int L = global.config().n_layer;
  if (first_layer < 0 || end_layer > L || first_layer >= end_layer)
    fail("StageLayout: bad block range [", first_layer, ", ", end_layer, ") of ", L);
  owned_.begin = has_embedding() ? 0 : global.block(first_layer).begin;
  owned_.end = has_head() ? global.total() : global.block(end_layer - 1).end;
  const TensorInfo& wte = global.tensor(Param::wte);
  if (has_head() && !has_embedding()) {
    tied_ = wte.range.size();
    local_.push_back(wte);  // already at [0, tied_)
    units_.push_back({UnitKind::tied_wte, -1, {0, tied_}});
  }
  for (const TensorInfo& t : global.tensors()) {
    if (!owned_.contains(t.range)) continue;
    TensorInfo l = t;
    l.range = {t.range.begin - owned_.begin + tied_, t.range.end - owned_.begin + tied_};
    local_.push_back(l);
  }
  auto local = [&](Range g) { return Range{g.begin - owned_.begin + tied_, g.end - owned_.begin + tied_}; };
  if (has_embedding()) {
    units_.push_back({UnitKind::wte, -1, local(wte.range)});
    units_.push_back({UnitKind::wpe, -1, local(global.tensor(Param::wpe).range)});
  }
  for (int l = first_; l < end_; ++l) units_.push_back({UnitKind::block, l, local(global.block(l))});
  if (has_head()) units_.push_back({UnitKind::final_norm, -1, local(global.final_norm())});
}

const TensorInfo& StageLayout::tensor(Param kind, int layer) const {
  for (const TensorInfo& t : local_)
    if (t.kind == kind && t.layer == layer) return t;
  fail("stage [", first_, ", ", end_, ") holds no tensor ", param_name(kind), " of layer ", layer);
}

Range StageLayout::block(int layer) const {
  return {tensor(Param::ln1w, layer).range.begin, tensor(Param::fcprojb, layer).range.end};
}

int StageLayout::unit_index(UnitKind kind, int layer) const {
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].kind == kind && units_[i].layer == layer) return int(i);
  return -1;
}

int StageLayout::head_wte_unit() const {
  const int tied = unit_index(UnitKind::tied_wte);
  return tied >= 0 ? tied : unit_index(UnitKind::wte);
}

void local_to_global(const StageLayout& layout, const float* local, float* global) {
  for (const TensorInfo& t : layout.tensors()) {
    if (t.range.begin < layout.tied_size()) continue;  // the tied copy of wte
    const GlobalMap& g = t.global;
    for (size_t i = 0; i < g.count; ++i)
      std::copy(local + t.range.begin + i * g.len, local + t.range.begin + (i + 1) * g.len, global + g.begin + i * g.stride);
  }
}

void global_to_local(const StageLayout& layout, const std::function<void(size_t, size_t, float*)>& read, float* local) {
  for (const TensorInfo& t : layout.tensors()) {
    const GlobalMap& g = t.global;
    if (g.stride == g.len) {  // contiguous runs: one read
      read(g.begin, g.size(), local + t.range.begin);
      continue;
    }
    for (size_t i = 0; i < g.count; ++i) read(g.begin + i * g.stride, g.len, local + t.range.begin + i * g.len);
  }
}

}  // namespace gpt2
