#include "parallel/shard_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gpt2 {

ShardLayout::ShardLayout(const StageLayout& layout, int D, int r, size_t bucket_elems) : D_(D) {
  const size_t k = std::max<size_t>(1, bucket_elems / size_t(D)) * size_t(D);  // a multiple of D
  const auto& units = layout.units();
  by_unit_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const Range ur = units[u].range;
    if (ur.size() % size_t(D) != 0)  // (the layout pads its units: StageLayout's unit_multiple)
      fail("ShardLayout: unit ", units[u].name(), " of ", ur.size(), " values does not share out over ", D, " ranks");
    std::vector<Range> cuts;  // from the unit's end
    for (size_t end = ur.end; end > ur.begin;) {
      const size_t begin = end - ur.begin > k ? end - k : ur.begin;
      cuts.push_back({begin, end});
      end = begin;
    }
    std::reverse(cuts.begin(), cuts.end());
    for (const Range& c : cuts) {
      const size_t part = c.size() / size_t(D);
      const Range piece{c.begin + size_t(r) * part, c.begin + size_t(r + 1) * part};
      by_unit_[u].push_back(int(buckets_.size()));
      buckets_.push_back({int(u), c, piece, shard_});
      // The tensors' parts inside this piece, in shard coordinates.
      for (const TensorInfo& t : layout.tensors()) {
        const size_t b = std::max(t.range.begin, piece.begin), e = std::min(t.range.end, piece.end);
        if (b >= e) continue;
        const Range at{shard_ + b - piece.begin, shard_ + e - piece.begin};
        TensorInfo* last = shard_tensors_.empty() ? nullptr : &shard_tensors_.back();
        if (last && last->kind == t.kind && last->layer == t.layer && last->range.end == at.begin) {
          last->range.end = at.end;  // the tensor's part in the previous piece goes on here
          continue;
        }
        TensorInfo s = t;
        s.range = at;
        shard_tensors_.push_back(s);
      }
      shard_ += part;
    }
  }
  optimizer_shards_ = tensor_shards(shard_tensors_);
}

Range ShardLayout::shard_range(int unit) const {
  const auto& b = by_unit_[size_t(unit)];
  if (b.empty()) return {0, 0};
  const Bucket &first = buckets_[size_t(b.front())], &last = buckets_[size_t(b.back())];
  return {first.shard_offset, last.shard_offset + last.piece.size()};
}

}  // namespace gpt2
