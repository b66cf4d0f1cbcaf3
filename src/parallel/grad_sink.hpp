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
  // A step of `microbatches`; zeroed: the last update left the accumulating buffer 0, but for the
  // regions kept() gave it.
  void begin_step(int microbatches, bool zeroed);
  // UnitStore::first_write of the buffer grads(u) gives: whether a writer that can store (store)
  // must store its values (beta 0) rather than add them.
  bool first_write(int u, const float* at, size_t n, bool store);
  // A writer that asked first_write has written [at, at + n) of grads(u), the last it writes there this
  // microbatch: where they are then final for the step, the norm may take their sums now (in cache).
  virtual void wrote(int u, const float* at, size_t n) {}
  // The regions of the optimizer's gradient buffer that the update may leave as they are, where the
  // sink keeps them (ZeRO-0): those a product stored over first this step. The next step's first
  // writer of each stores over it again; where that changes, first_write and done zero it first.
  const std::vector<Range>& kept();
  virtual void finish() = 0;  // every unit's reduction launched (the reducer then completes them)
  // The optimizer's pass reads the accumulating buffer and may zero it in place; not so where
  // ZeRO-1's reduce-scatter overwrites the shard from the whole gradients.
  virtual bool zeroed_by_update() const = 0;
  virtual size_t whole_size() const { return 0; }  // values of a whole-layout buffer kept

 protected:
  explicit GradSink(size_t units) : done_(units, 0), written_(units), stored_(units), stale_(units) {
    for (auto* list : {&written_, &stored_, &stale_})
      for (auto& w : *list) w.reserve(16);  // a block's writers: no step allocates
    kept_.reserve(16 * units);
  }
  virtual void zero(bool zeroed) = 0;
  // Whether the update may leave the stored regions of the accumulating buffer (kept()), which
  // then starts the step with them; where it begins at 0, which offset grads(u) has in that buffer.
  virtual bool keeps_stored() const { return false; }
  virtual size_t offset(int u) const { return 0; }
  virtual void writing(int u, Range r) {}  // first_write's region r of grads(u), before it is written
  void zeroed(int u) { written_[size_t(u)].clear(); }  // u's buffer was set to 0 again
  bool last_of_step(int u) { return ++done_[size_t(u)] == microbatches_; }
  bool incomplete(int u) const { return done_[size_t(u)] < microbatches_; }
  // u's gradient is about to be read: the last step's values no writer came to, to 0.
  void settle(int u);

  std::vector<int> done_;  // each unit's microbatches seen this step
  // Per unit, in unit offsets: what was added to since it was 0; of that, what a product stored over
  // first; what still holds the last step's values (kept by the update, not written yet).
  std::vector<std::vector<Range>> written_, stored_, stale_;
  std::vector<Range> kept_;  // kept()'s answer, in the optimizer buffer's offsets
  int microbatches_ = 1;

 private:
  void clear(int u, Range r);  // values r of grads(u) to 0 (ordered on the stream)
};

// policy.grads: WorkspaceGrads, else WholeGrads; whole: the whole layout's buffer for WholeGrads
// (the shard's own without a sharded update).
std::unique_ptr<GradSink> make_grad_sink(const ShardPolicy& policy, const StoreParts& parts, Buffer<float> whole);

}  // namespace gpt2
