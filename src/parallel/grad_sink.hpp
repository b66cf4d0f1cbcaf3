#pragma once
// Where a ParamStore's gradients accumulate over a step's microbatches: the ZeRO level's part that
// concerns them (parallel/param_store.hpp). WholeGrads: the whole local layout accumulates and is
// reduced after the step's last microbatch -- all-reduced in place (ZeRO-0) or reduce-scattered
// into the shard (ZeRO-1). WorkspaceGrads: each microbatch's unit gradient goes to a pooled
// workspace, reduced into the shard (which accumulates) at once and recycled (ZeRO-2/3).
#include <memory>
#include <vector>

#include "core/range.hpp"
#include "parallel/store_parts.hpp"
#include "parallel/zero.hpp"

namespace gpt2 {

class GradSink {
 public:
  virtual ~GradSink() = default;
  virtual float* grads(int u) = 0;
  virtual void done(int u) = 0;  // u's gradient of this microbatch is complete
  // A step of `microbatches`; zeroed: the last update left the accumulating buffer 0.
  void begin_step(int microbatches, bool zeroed) {
    microbatches_ = microbatches;
    for (int& d : done_) d = 0;
    zero(zeroed);
    for (auto& w : written_) w.clear();  // every buffer is 0 now
  }
  // UnitStore::first_write of the buffer grads(u) gives.
  bool first_write(int u, const float* at, size_t n);
  virtual void finish() = 0;  // every unit's reduction launched (the reducer then completes them)
  // The optimizer's pass reads the accumulating buffer and may zero it in place; not so where
  // ZeRO-1's reduce-scatter overwrites the shard from the whole gradients.
  virtual bool zeroed_by_update() const = 0;
  virtual size_t whole_size() const { return 0; }  // values of a whole-layout buffer kept

 protected:
  explicit GradSink(size_t units) : done_(units, 0), written_(units) {
    for (auto& w : written_) w.reserve(16);  // a block's writers: no step allocates
  }
  virtual void zero(bool zeroed) = 0;
  void zeroed(int u) { written_[size_t(u)].clear(); }  // u's buffer was set to 0 again
  bool last_of_step(int u) { return ++done_[size_t(u)] == microbatches_; }
  bool incomplete(int u) const { return done_[size_t(u)] < microbatches_; }

  std::vector<int> done_;  // each unit's microbatches seen this step
  std::vector<std::vector<Range>> written_;  // per unit: what was added to since it was 0 (unit offsets)
  int microbatches_ = 1;
};

// policy.grads: WorkspaceGrads, else WholeGrads; whole: the whole layout's buffer for WholeGrads
// (the shard's own without a sharded update).
std::unique_ptr<GradSink> make_grad_sink(const ShardPolicy& policy, const StoreParts& parts, Buffer<float> whole);

}  // namespace gpt2
