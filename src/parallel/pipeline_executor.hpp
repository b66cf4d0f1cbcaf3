#pragma once
// Runs one rank's pipeline actions for a step: forwards and backwards on the local Stage, activations
// sent to the next stage and their gradients back to the previous one over the pipeline
// Communicator. Each microbatch's saved activations live in a slot taken from a pool when its
// forward starts and returned as soon as its backward is done (or, in evaluation, once its output
// is sent), so the pool's size is the schedule's peak in-flight count: m for GPipe, p - stage for
// 1F1B. Input gradients travel back from small buffers of their own.
// With one stage (a serial pipeline communicator) this is plain gradient accumulation.
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "model/stage.hpp"
#include "runtime/communicator.hpp"
#include "runtime/schedule.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class PipelineExecutor {
 public:
  // pipe: communicator of this rank's pipeline (rank == stage index).
  PipelineExecutor(Stage<float>& stage, Communicator& pipe, Tracer& tracer);

  struct StepIO {
    int step = 0;
    int microbatch_size = 1;                               // sequences per microbatch
    std::function<void(int mb, Activations<float>&)> load;  // fill tokens / targets (first & head stage)
    Vec<float> losses;          // head stage: per-token losses, microbatch mb at offset mb * B * T
    float dloss = 0;            // d(loss) / d(each token loss)
    bool need_grad = true;
  };
  void run(const std::vector<Action>& actions, const StepIO& io);

  int peak_slots() const { return peak_slots_; }          // most microbatches held at once
  size_t slot_bytes() const { return slot_bytes_; }        // saved activations per microbatch
  void reset_peak() { peak_slots_ = 0; }

 private:
  struct Slot {
    std::unique_ptr<Activations<float>> act;
    Request send;  // activation still on its way
  };
  struct GradSend {  // a microbatch's input gradient on its way back (N*C floats)
    Buffer<float> buf;
    Request send;
  };
  Slot& acquire(int mb, int B);
  void release(int mb);  // back to the pool once its send completed
  Buffer<float> grad_buffer(size_t n);  // a free gradient send buffer
  void drain();          // complete every pending send, return their buffers
  // A paired send and receive with one neighbour, waited for here because the received tensor is
  // needed at once; both buffers are free again on return.
  void exchange(const float* send, float* recv, size_t elems, int peer, int send_tag, int recv_tag,
                int step, int send_mb, int recv_mb);

  Stage<float>& stage_;
  int index_;
  Communicator& pipe_;
  Tracer& tracer_;
  std::map<int, Slot> live_;      // by microbatch
  std::vector<Slot> releasing_;   // done, its activation's send still pending
  std::vector<std::unique_ptr<Activations<float>>> pool_;
  std::vector<GradSend> grad_sends_;  // in flight
  std::vector<Buffer<float>> grad_pool_;
  int peak_slots_ = 0, pool_B_ = -1;
  size_t slot_bytes_ = 0;
};

}  // namespace gpt2
