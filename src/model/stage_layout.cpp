#include "model/stage_layout.hpp"

#include "core/error.hpp"

namespace gpt2 {

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
  }
  for (const TensorInfo& t : global.tensors()) {
    if (!owned_.contains(t.range)) continue;
    TensorInfo l = t;
    l.range = {t.range.begin - owned_.begin + tied_, t.range.end - owned_.begin + tied_};
    local_.push_back(l);
  }
}

const TensorInfo& StageLayout::tensor(Param kind, int layer) const {
  for (const TensorInfo& t : local_)
    if (t.kind == kind && t.layer == layer) return t;
  fail("stage [", first_, ", ", end_, ") holds no tensor ", param_name(kind), " of layer ", layer);
}

Range StageLayout::block(int layer) const {
  return {tensor(Param::ln1w, layer).range.begin, tensor(Param::fcprojb, layer).range.end};
}

}  // namespace gpt2
