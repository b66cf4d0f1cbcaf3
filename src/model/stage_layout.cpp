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

namespace {
// This tp rank's part of a global tensor: local shape, where its elements sit, replicated or not.
TensorInfo split(const TensorInfo& g, const ModelConfig& c, TpSplit tp) {
  TensorInfo t = g;
  if (tp.size == 1) return t;
  const size_t T = size_t(tp.size), r = size_t(tp.rank), C = size_t(c.n_embd), b = g.range.begin;
  auto rows = [&](size_t first, size_t rows_each, size_t row_len, size_t stride, size_t count) {
    t.global = {b + first * row_len, rows_each * row_len, stride, count};
  };
  switch (g.kind) {
    case Param::wte: {  // vocabulary-parallel: a block of rows
      const size_t rows_each = size_t(c.padded_vocab()) / T;
      rows(r * rows_each, rows_each, C, 0, 1);
      t.shape = {rows_each, C};
      break;
    }
    case Param::qkvw:  // column-parallel with the heads divided: the same rows of q, k and v
      rows(r * C / T, C / T, C, C * C, 3);
      t.shape = {3 * C / T, C};
      break;
    case Param::qkvb:
      rows(r * C / T, C / T, 1, C, 3);
      t.shape = {3 * C / T};
      break;
    case Param::fcw:  // column-parallel
      rows(r * 4 * C / T, 4 * C / T, C, 0, 1);
      t.shape = {4 * C / T, C};
      break;
    case Param::fcb:
      rows(r * 4 * C / T, 4 * C / T, 1, 0, 1);
      t.shape = {4 * C / T};
      break;
    case Param::attprojw:  // row-parallel: a block of input columns of every row
      t.global = {b + r * C / T, C / T, C, C};
      t.shape = {C, C / T};
      break;
    case Param::fcprojw:
      t.global = {b + r * 4 * C / T, 4 * C / T, 4 * C, C};
      t.shape = {C, 4 * C / T};
      break;
    default:  // LayerNorms, row-parallel biases, wpe
      t.replicated = true;
      return t;
  }
  if (t.global.count == 1) t.global.stride = t.global.len;
  return t;
}
}  // namespace

StageLayout::StageLayout(const ParamLayout& global, std::vector<BlockRange> chunks, TpSplit tp, size_t unit_multiple)
    : global_(&global), chunks_(std::move(chunks)), tp_(tp) {
  const int L = global.config().n_layer;
  if (chunks_.empty()) fail("StageLayout: no blocks");
  for (const BlockRange& c : chunks_) {
    if (c.first < 0 || c.end > L || c.first >= c.end)
      fail("StageLayout: bad block range [", c.first, ", ", c.end, ") of ", L);
    embedding_ = embedding_ || c.first == 0;
    head_ = head_ || c.end == L;
  }
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) fail("StageLayout: bad tensor-parallel rank ", tp.rank, " of ", tp.size);
  const ModelConfig& c = global.config();
  // Local tensors in order, each packed after the one before.
  auto add = [&](const TensorInfo& g) {
    TensorInfo t = split(g, c, tp);
    t.range = {size_, size_ + t.global.size()};
    size_ += t.global.size();
    local_.push_back(t);
  };
  if (unit_multiple < 1) fail("StageLayout: unit multiple ", unit_multiple);
  auto unit = [&](UnitKind kind, int layer, size_t begin) {
    size_ = (size_ + unit_multiple - 1) / unit_multiple * unit_multiple;
    units_.push_back({kind, layer, {begin, size_}});
  };
  const TensorInfo& wte = global.tensor(Param::wte);
  if (head_ && !embedding_) {
    add(wte);
    unit(UnitKind::tied_wte, -1, 0);
    tied_ = size_;
  }
  if (embedding_) {
    size_t b = size_;
    add(wte);
    unit(UnitKind::wte, -1, b);
    b = size_;
    add(global.tensor(Param::wpe));
    unit(UnitKind::wpe, -1, b);
  }
  for (const BlockRange& ch : chunks_)
    for (int l = ch.first; l < ch.end; ++l) {
      const size_t b = size_;
      for (size_t i = global.index(Param::ln1w, l); i <= global.index(Param::fcprojb, l); ++i) add(global.tensors()[i]);
      unit(UnitKind::block, l, b);
    }
  if (head_) {
    const size_t b = size_;
    add(global.tensor(Param::lnfw));
    add(global.tensor(Param::lnfb));
    unit(UnitKind::final_norm, -1, b);
  }
}

int StageLayout::vocab_begin() const { return tp_.rank * local_vocab(); }
int StageLayout::local_vocab() const { return global_->config().padded_vocab() / tp_.size; }

const TensorInfo& StageLayout::tensor(Param kind, int layer) const {
  for (const TensorInfo& t : local_)
    if (t.kind == kind && t.layer == layer) return t;
  fail("the rank's layout holds no tensor ", param_name(kind), " of layer ", layer);
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
    if (t.range.begin < layout.tied_size()) continue;       // the tied copy of wte
    if (t.replicated && layout.tp().rank != 0) continue;   // tp rank 0 writes those
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
