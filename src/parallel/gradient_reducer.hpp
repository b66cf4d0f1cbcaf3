#pragma once
// Data-parallel gradient reduction, unit by unit and bucket by bucket (ShardLayout), each launched as
// soon as the unit's gradient is complete, while backward goes on with earlier blocks; all are
// awaited before clipping and the optimizer. Two ways:
//   all-reduce      (ZeRO-0) the average in place, every rank keeps the whole gradient
//   reduce-scatter  (ZeRO-1..3) each rank receives the average of its piece of every bucket, into
//                   its shard -- written, or added to what earlier microbatches left there
// Trace events carry the collective's data volume as the ZeRO paper counts it (all-reduce twice the
// buffer, reduce-scatter once); the bytes a rank puts on the wire are (D-1)/D of that.
// On the wire the gradients are fp32, or bf16 (parallel.grad_reduce_dtype): each bucket is rounded
// into a bf16 staging buffer, reduced there (fp32 adds, rounded back each time) and converted back
// into the fp32 gradients or shard -- half the bytes, at bf16's precision.
#include <functional>
#include <vector>

#include "parallel/shard_layout.hpp"
#include "plugins/communicator.hpp"
#include "tensor/buffer_pool.hpp"
#include "tensor/half.hpp"
#include "tensor/views.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class GradientReducer {
 public:
  enum class Mode { all_reduce, reduce_scatter };
  GradientReducer(Communicator& dp, const ShardLayout& shards, Mode mode, Tracer& tracer, DType wire = DType::f32);

  // Set-up: a staging buffer for every bucket of one backward (bf16 on the wire; reduce-scatters that
  // `accumulate` into the shard), made now -- no step allocates, and no reduction waits for an
  // earlier one to free its buffer.
  void reserve(bool accumulate);
  void begin_step(int step);
  // Reduces unit u's gradient, which lies at `unit_grads` (the unit's first element). All-reduce:
  // in place. Reduce-scatter: each bucket's piece to `shard` at its shard offset, added to what is
  // there when `accumulate`. `done` runs once every bucket of the unit has completed.
  void reduce(int u, float* unit_grads, float* shard, bool accumulate, std::function<void()> done = {});
  // reduce() leaves the gradient as it is and its `done` runs at once (all-reduce on one rank).
  bool in_place() const { return mode_ == Mode::all_reduce && !active(); }
  void progress();  // completes what has arrived (MPI advances only inside MPI calls)
  // The oldest reduction in flight, completed (ordered before the kernels after it) and its `done`
  // run: what a workspace pool that ran short calls. False when none is in flight.
  bool complete_oldest();
  void finish();    // waits for everything launched

  // Times its own buffers ran short while the oldest reduction in flight was one of the last
  // backward's buckets -- compute made to wait on a reduction it just issued (0 when reserve() made
  // a buffer a bucket, as it should; reclaiming an earlier backward's is no wait worth the name).
  int64_t waits_for_buffers() const { return buffer_waits_; }
  // Seconds of the last step spent issuing and blocked waiting.
  double issue_seconds() const { return issue_s_; }
  double wait_seconds() const { return wait_s_; }

 private:
  struct Pending {
    Request request;
    int unit = 0;
    float* dst = nullptr;              // accumulate: where the staged piece is added (bf16: where it goes)
    Buffer<float> staging;   // accumulate: the reduced piece
    std::function<void()> done;  // set on the unit's last bucket
    Buffer<bf16> wire;       // bf16 on the wire: the bucket (all-reduce) or the received piece
    Buffer<bf16> wire_send;  // bf16 reduce-scatter: the bucket sent
    bool add = false;        // bf16: dst += the piece (else dst = it)
    int64_t seq = 0;         // its place among the reductions issued
  };
  bool reclaim();  // a buffer of the reducer's own pools back: complete_oldest, counting a recent one
  void complete(Pending& p);
  bool active() const { return dp_.size() > 1; }
  Communicator& dp_;
  const ShardLayout& shards_;
  Mode mode_;
  Tracer& tracer_;
  DType wire_;
  BufferPool<bf16> wire_pool_{"reduce_bf16"};
  std::vector<Pending> pending_;
  BufferPool<float> staging_pool_{"reduce_staging"};
  int step_ = 0;
  int64_t buffer_waits_ = 0, issued_ = 0, buckets_ = 0;  // buckets_: a backward's (reserve)
  double issue_s_ = 0, wait_s_ = 0;
};

}  // namespace gpt2
