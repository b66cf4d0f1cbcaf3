#pragma once
// Data-parallel gradient averaging in buckets of the flat gradient buffer. Backward finishes the
// buffer from its end towards its start (last block first), so buckets are cut from the end; each
// bucket's all-reduce is launched as soon as backward has passed its start, while earlier blocks are
// still computing, and all are awaited before clipping and the optimizer.
#include <vector>

#include "model/param_layout.hpp"
#include "runtime/communicator.hpp"
#include "tensor/views.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class GradientReducer {
 public:
  // dp: the data-parallel group (of one rank: nothing to do). bucket_elems: floats per bucket.
  GradientReducer(Communicator& dp, Vec<float> grads, size_t bucket_elems, Tracer& tracer);

  void begin_step(int step);
  // Backward has finished the gradients at offsets >= frontier: launch the buckets inside.
  void ready(size_t frontier);
  // Launch what is left and wait for everything.
  void finish();

  int num_buckets() const { return int(buckets_.size()); }
  // Seconds of the last step spent issuing all-reduces and blocked waiting for them.
  double issue_seconds() const { return issue_s_; }
  double wait_seconds() const { return wait_s_; }

 private:
  void launch(size_t b);
  bool active() const { return dp_.size() > 1; }
  Communicator& dp_;
  Vec<float> grads_;
  Tracer& tracer_;
  std::vector<Range> buckets_;  // buckets_[0] is the last range of the buffer
  std::vector<Request> pending_;
  size_t next_ = 0;             // first bucket not launched yet
  int step_ = 0;
  double issue_s_ = 0, wait_s_ = 0;
};

}  // namespace gpt2
