#include "parallel/gradient_reducer.hpp"

#include <algorithm>

namespace gpt2 {

GradientReducer::GradientReducer(Communicator& dp, Vec<float> grads, size_t bucket_elems, Tracer& tracer)
    : dp_(dp), grads_(grads), tracer_(tracer) {
  const size_t n = grads.extent(0), b = std::max<size_t>(bucket_elems, 1);
  for (size_t end = n; end > 0;) {
    const size_t begin = end > b ? end - b : 0;
    buckets_.push_back({begin, end});
    end = begin;
  }
  pending_.resize(buckets_.size());
}

void GradientReducer::begin_step(int step) {
  step_ = step;
  next_ = 0;
  issue_s_ = wait_s_ = 0;
}

void GradientReducer::launch(size_t b) {
  const double t0 = tracer_.now();
  // No fence: the MPI backend's host staging copy orders after the kernels (and on the host
  // backend they already ran); NCCL's stream waits on an event of the Kokkos stream.
  pending_[b] = dp_.iallreduce(grads_.data() + buckets_[b].begin, buckets_[b].size(), DType::f32, ReduceOp::avg);
  const double t1 = tracer_.now();
  issue_s_ += t1 - t0;
  tracer_.record(EventKind::allreduce_issue, step_, int(b), t0, t1, int64_t(buckets_[b].size() * sizeof(float)));
}

void GradientReducer::ready(size_t frontier) {
  if (!active()) return;
  while (next_ < buckets_.size() && buckets_[next_].begin >= frontier) launch(next_++);
  dp_.progress();  // MPI advances non-blocking collectives only inside MPI calls
}

void GradientReducer::finish() {
  if (!active()) return;
  while (next_ < buckets_.size()) launch(next_++);
  const double t0 = tracer_.now();
  for (Request& r : pending_) dp_.wait(r);
  const double t1 = tracer_.now();
  wait_s_ = t1 - t0;
  tracer_.record(EventKind::allreduce_wait, step_, -1, t0, t1);
}

}  // namespace gpt2
