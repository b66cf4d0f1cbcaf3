#pragma once
// A half-open range of indices [begin, end) into a flat buffer: a tensor, a block, a bucket or a
// rank's shard of the one parameter buffer (model/param_layout.hpp), or a run of an optimizer's.
#include <cstddef>

namespace gpt2 {

struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool contains(const Range& o) const { return o.begin >= begin && o.end <= end; }
};

}  // namespace gpt2
