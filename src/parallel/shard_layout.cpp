#include "parallel/shard_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gpt2 {

namespace {
// Rank q's piece of a bucket shared out over D ranks: its q-th D-th.
Range piece_of(const Range& bucket, int D, int q) {
  const size_t part = bucket.size() / size_t(D);
  return {bucket.begin + size_t(q) * part, bucket.begin + size_t(q + 1) * part};
}
}  // namespace

ShardLayout::ShardLayout(const StageLayout& layout, int D, int r, size_t bucket_elems) : D_(D), me_(r) {
  if (D < 1 || r < 0 || r >= D) fail("ShardLayout: rank ", r, " of ", D);
  if (D > 1 && layout.shard_ranks() != size_t(D))
    fail("ShardLayout: sharing over ", D, " ranks a layout made for ", layout.shard_ranks());
  by_unit_.resize(layout.units().size());
  for (const RowSegment& s : layout.segments()) {
    if (s.range.size() % (size_t(D) * s.row_len) != 0)  // (the layout pads them: StageLayout's shard_ranks)
      fail("ShardLayout: a segment of ", layout.units()[size_t(s.unit)].name(), " holds ", s.range.size() / s.row_len,
           " rows of ", s.row_len, ", which do not share out over ", D, " ranks");
    const size_t first = buckets_.size();
    cut_segment(s, bucket_elems);
    for (size_t b = first; b < buckets_.size(); ++b) add_tensor_parts(layout, buckets_[b]);
  }
  optimizer_shards_ = tensor_shards(shard_tensors_);
  for (size_t i = 0; i < optimizer_shards_.size(); ++i) {
    const TensorInfo& t = shard_tensors_[i];
    optimizer_shards_[i].rows = rows_of(layout.tensor(t.kind, t.layer), me_);
  }
}

// The segment's buckets in local order, cut from its end: a multiple of D rows each.
void ShardLayout::cut_segment(const RowSegment& s, size_t bucket_elems) {
  const size_t grain = size_t(D_) * s.row_len;
  const size_t k = std::max<size_t>(1, bucket_elems / grain) * grain;
  std::vector<Range> cuts;
  for (size_t end = s.range.end; end > s.range.begin;) {
    const size_t begin = end - s.range.begin > k ? end - k : s.range.begin;
    cuts.push_back({begin, end});
    end = begin;
  }
  std::reverse(cuts.begin(), cuts.end());
  for (const Range& c : cuts) {
    const Range piece = piece_of(c, D_, me_);
    by_unit_[size_t(s.unit)].push_back(int(buckets_.size()));
    buckets_.push_back({s.unit, c, piece, shard_});
    shard_ += piece.size();
  }
}

// The tensors' parts inside bucket b's piece, in shard coordinates (a tensor's part in the previous
// piece goes on in this one: one run).
void ShardLayout::add_tensor_parts(const StageLayout& layout, const Bucket& b) {
  for (const TensorInfo& t : layout.tensors()) {
    const size_t lo = std::max(t.range.begin, b.piece.begin), hi = std::min(t.range.end, b.piece.end);
    if (lo >= hi) continue;
    const Range at{b.shard_offset + lo - b.piece.begin, b.shard_offset + hi - b.piece.begin};
    TensorInfo* last = shard_tensors_.empty() ? nullptr : &shard_tensors_.back();
    if (last && last->kind == t.kind && last->layer == t.layer && last->range.end == at.begin) {
      last->range.end = at.end;
      continue;
    }
    TensorInfo s = t;
    s.range = at;
    shard_tensors_.push_back(s);
  }
}

std::vector<Range> ShardLayout::rows_of(const TensorInfo& t, int q) const {
  std::vector<Range> held;  // values of t, relative to its first
  for (const Bucket& b : buckets_) {
    const Range p = piece_of(b.range, D_, q);
    const size_t lo = std::max(p.begin, t.range.begin), hi = std::min(p.end, t.range.end);
    if (lo >= hi) continue;
    if (!held.empty() && held.back().end == lo - t.range.begin)
      held.back().end = hi - t.range.begin;
    else
      held.push_back({lo - t.range.begin, hi - t.range.begin});
  }
  const size_t row = row_length(t);
  std::vector<Range> rows;
  for (const Range& h : held) {
    if (h.begin % row || h.end % row) fail("ShardLayout: rank ", q, "'s part of ", t.name(), " cuts a row");
    rows.push_back({h.begin / row, h.end / row});
  }
  return rows;
}

Range ShardLayout::shard_range(int unit) const {
  const auto& b = by_unit_[size_t(unit)];
  if (b.empty()) return {0, 0};
  const Bucket &first = buckets_[size_t(b.front())], &last = buckets_[size_t(b.back())];
  return {first.shard_offset, last.shard_offset + last.piece.size()};
}

}  // namespace gpt2
