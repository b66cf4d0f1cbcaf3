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

StageLayout::StageLayout(const ParamLayout& global, std::vector<BlockRange> chunks, TpSplit tp, size_t shard_ranks)
    : global_(&global), chunks_(std::move(chunks)), tp_(tp), shard_ranks_(shard_ranks) {
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
  if (shard_ranks < 1) fail("StageLayout: ", shard_ranks, " shard ranks");
  std::vector<TensorInfo> pending;  // the unit's tensors, placed when it closes
  auto add = [&](const TensorInfo& g) { pending.push_back(split(g, c, tp)); };
  auto unit = [&](UnitKind kind, int layer) {
    place_unit(kind, layer, std::move(pending), shard_ranks);
    pending.clear();
  };
  const TensorInfo& wte = global.tensor(Param::wte);
  if (head_ && !embedding_) {
    add(wte);
    unit(UnitKind::tied_wte, -1);
    tied_ = size_;
  }
  if (embedding_) {
    add(wte);
    unit(UnitKind::wte, -1);
    add(global.tensor(Param::wpe));
    unit(UnitKind::wpe, -1);
  }
  for (const BlockRange& ch : chunks_)
    for (int l = ch.first; l < ch.end; ++l) {
      for (size_t i = global.index(Param::ln1w, l); i <= global.index(Param::fcprojb, l); ++i) add(global.tensors()[i]);
      unit(UnitKind::block, l);
    }
  if (head_) {
    add(global.tensor(Param::lnfw));
    add(global.tensor(Param::lnfb));
    unit(UnitKind::final_norm, -1);
  }
}

// Without sharding the unit's tensors keep the global order, one segment of values (one stage is
// then the global layout itself). With it they go by row length, longest first (the block's
// matrices, then its vectors); a run of one row length is a segment, padded to whole rows for each
// of the shard ranks.
void StageLayout::place_unit(UnitKind kind, int layer, std::vector<TensorInfo> ts, size_t shard_ranks) {
  auto row = [&](const TensorInfo& t) { return shard_ranks > 1 ? row_length(t) : size_t(1); };
  std::stable_sort(ts.begin(), ts.end(), [&](const TensorInfo& a, const TensorInfo& b) { return row(a) > row(b); });
  const size_t begin = size_;
  auto close = [&] {
    RowSegment& s = segments_.back();
    const size_t grain = shard_ranks * s.row_len;
    size_ = s.range.begin + (size_ - s.range.begin + grain - 1) / grain * grain;
    s.range.end = size_;
  };
  for (TensorInfo& t : ts) {
    if (size_ == begin || segments_.back().row_len != row(t)) {
      if (size_ != begin) close();
      segments_.push_back({int(units_.size()), {size_, size_}, row(t)});
    }
    t.range = {size_, size_ + t.global.size()};
    size_ += t.global.size();
    local_.push_back(std::move(t));
  }
  if (size_ != begin) close();
  units_.push_back({kind, layer, {begin, size_}});
}

int StageLayout::vocab_begin() const { return tp_.rank * local_vocab(); }
int StageLayout::local_vocab() const { return global_->config().padded_vocab() / tp_.size; }

const TensorInfo& StageLayout::tensor(Param kind, int layer) const {
  for (const TensorInfo& t : local_)
    if (t.kind == kind && t.layer == layer) return t;
  fail("the rank's layout holds no tensor ", param_name(kind), " of layer ", layer);
}

Range StageLayout::block(int layer) const {
  const int u = unit_index(UnitKind::block, layer);
  if (u < 0) fail("the rank's layout holds no block ", layer);
  return units_[size_t(u)].range;
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

int block_segments(const ModelConfig& model, int tp, size_t shard_ranks) {
  ModelConfig one = model;
  one.n_layer = 1;
  const ParamLayout global(one);
  const StageLayout l(global, {{0, 1}}, TpSplit{tp, 0}, shard_ranks);
  const int u = l.unit_index(UnitKind::block, 0);
  return int(std::count_if(l.segments().begin(), l.segments().end(), [&](const RowSegment& s) { return s.unit == u; }));
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
