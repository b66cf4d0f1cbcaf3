#pragma once
// Context parallelism's ring shifts (model/cp_ring.hpp) on the cp group's Communicator: one grouped
// send-to-next / receive-from-previous each (so an ordered backend runs every rank's in step), traced
// as a cp_shift event from its start to its completion with the bytes it moves.
#include <vector>

#include "model/cp_ring.hpp"
#include "plugins/communicator.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class CommCpRing final : public CpRing<float> {
 public:
  CommCpRing(Communicator& cp, Tracer& tracer) : cp_(cp), tracer_(tracer) {}
  void set_step(int step) { step_ = step; }  // for the trace

  int size() const override { return cp_.size(); }
  int rank() const override { return cp_.rank(); }
  void start_shift(const float* send, float* recv, size_t n) override {
    const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
    pending_.push_back({cp_.isendrecv(send, n, next, kTag, recv, n, prev, kTag, DType::f32), tracer_.now(), n});
  }
  void finish_shifts() override {
    const double start = tracer_.now();
    for (Shift& s : pending_) {
      cp_.order_after(s.request);
      tracer_.record(EventKind::cp_shift, step_, -1, s.start, tracer_.now(), int64_t(s.n * sizeof(float)));
    }
    pending_.clear();
    if (tracer_.timing()) tracer_.note_wait(tracer_.now() - start);
  }

 private:
  static constexpr int kTag = 41;
  struct Shift {
    Request request;
    double start;
    size_t n;
  };
  Communicator& cp_;
  Tracer& tracer_;
  int step_ = 0;
  std::vector<Shift> pending_;
};

}  // namespace gpt2
