#pragma once
// The model's tensor-parallel collectives (model/tp_group.hpp) on the tp group's Communicator, each
// traced as a tp_collective event with the bytes it moves; the kernels after one run after it
// (order_after: a stream dependency, no host wait).
#include "model/tp_group.hpp"
#include "plugins/communicator.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class CommTpGroup final : public TpGroup<float> {
 public:
  CommTpGroup(Communicator& tp, Tracer& tracer) : tp_(tp), tracer_(tracer) {}
  void set_step(int step) { step_ = step; }  // for the trace

  int size() const override { return tp_.size(); }
  int rank() const override { return tp_.rank(); }
  void all_reduce_sum(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::sum); }
  void all_reduce_max(float* buf, size_t n) override { all_reduce(buf, n, ReduceOp::max); }
  void all_gather(const float* send, float* recv, size_t n) override {
    Tracer::Scope t(tracer_, EventKind::tp_collective, step_, -1, n * size() * sizeof(float));
    Request r = tp_.iall_gather(send, recv, n, DType::f32);
    tp_.order_after(r);
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    Tracer::Scope t(tracer_, EventKind::tp_collective, step_, -1, n * size() * sizeof(float));
    Request r = tp_.ireduce_scatter(send, recv, n, DType::f32, ReduceOp::sum);
    tp_.order_after(r);
  }

 private:
  void all_reduce(float* buf, size_t n, ReduceOp op) {
    if (size() == 1) return;
    Tracer::Scope t(tracer_, EventKind::tp_collective, step_, -1, 2 * n * sizeof(float));
    tp_.allreduce(buf, n, DType::f32, op);
  }
  Communicator& tp_;
  Tracer& tracer_;
  int step_ = 0;
};

}  // namespace gpt2
