#pragma once
// A tensor as an optimizer sees it on one rank: which of its rows the rank holds (the shard plan,
// parallel/shard_layout.hpp), where their values sit in the buffers the optimizer steps (one after
// another, row by row), the whole tensor's shape and its parameter group. The list of them is what the
// optimizer interface speaks (plugins/optimizer.hpp); the shard layout makes it
// (parallel/shard_layout, from model/shard_list).
#include <cstddef>
#include <string>
#include <vector>

#include "core/range.hpp"

namespace gpt2 {

// The groups the optimizers step with settings of their own.
enum class ParamGroup {
  matrices,  // the blocks' 2-D weights (qkv, the projections, fc): Muon's; weight decay
  decayed,   // the other tensors of rank >= 2 (the embeddings and the tied head): weight decay
  plain,     // biases and LayerNorms: no weight decay
};

struct TensorShard {
  std::string name;           // "h.3.qkvw"
  std::vector<size_t> shape;  // the whole tensor's, rows first (a vector's rows are its values)
  std::vector<Range> rows;    // the rows this rank holds, ascending
  Range run;                  // their values, in the optimizer's buffers
  ParamGroup group;
  bool decayed() const { return group != ParamGroup::plain; }
  size_t size() const {  // the whole tensor's values
    size_t n = 1;
    for (size_t d : shape) n *= d;
    return n;
  }
  bool whole() const { return run.size() == size(); }
  std::vector<size_t> held_shape() const {  // the shape of the run's values: the held rows, whole
    std::vector<size_t> s = shape;
    s[0] = 0;
    for (const Range& r : rows) s[0] += r.size();
    return s;
  }
};

}  // namespace gpt2
