#pragma once
// Runs one rank's pipeline actions for a step: forwards, backwards (whole, or split into B and W)
// and their messages, for each chunk (virtual stage) the rank holds; messages go through the
// pipeline's point-to-point layer (pipeline/p2p). Each (microbatch, chunk)'s saved activations live in
// a slot (pipeline/activation_slots.hpp) held from its forward to its backward, so the pool's size is
// the schedule's peak in-flight count: m for GPipe, p - stage for 1F1B. A received message (an activation for a forward, a gradient for a backward)
// waits in an inbox buffer until the compute that needs it, so a schedule may receive a message
// before its turn (as NCCL's in-order matching needs); a message to a chunk on the same rank (the
// V's turn) goes straight to the inbox. With one stage this is plain gradient accumulation.
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "model/stage.hpp"
#include "pipeline/activation_slots.hpp"
#include "pipeline/p2p.hpp"
#include "pipeline/schedule.hpp"
#include "tensor/buffer_pool.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class PipelineExecutor {
 public:
  // chunks: the rank's stages, chunk by chunk; pipe: its pipeline's communicator (rank == pipeline
  // rank; the links between neighbours are made from it, collectively); split: backwards come as B
  // and W (the activations keep what W needs).
  PipelineExecutor(std::vector<Stage<float>*> chunks, const Placement& placement, Communicator& pipe, Tracer& tracer,
                   bool split = false);

  struct StepIO {
    int step = 0;
    int microbatch_size = 1;                               // sequences per microbatch
    std::function<void(int mb, Activations<float>&)> load;  // fill tokens / targets (first & head chunk)
    Vec<float> losses;          // head chunk: per-token losses, microbatch mb at offset mb * B * T
    float dloss = 0;            // d(loss) / d(each token loss)
    bool need_grad = true;
  };
  void run(const std::vector<Action>& actions, const StepIO& io);
  // Set-up: every activation slot and message buffer that running the training and evaluation lists
  // with microbatches of B sequences needs, made now, so that no step allocates (executor_reserve.cpp).
  void reserve(const std::vector<Action>& train, const std::vector<Action>& eval, int B);

  int peak_slots() const { return slots_.peak(); }          // most microbatch-chunks held at once
  size_t slot_bytes() const { return slots_.slot_bytes(); }  // saved activations per microbatch-chunk (largest)
  void reset_peak() { slots_.reset_peak(); }

 private:
  using MessageKey = std::tuple<bool, int, int>;  // (gradient?, microbatch, chunk it is for)
  using Slot = ActivationSlots::Slot;
  struct Outgoing {  // a message on its way (its own buffer: the source is reused)
    Buffer<float> buf;
    PipelineP2P::Handle send;
  };
  struct Incoming {  // a posted receive, waited for by the compute that needs it
    PipelineP2P::Handle handle;
    Buffer<float> buf;
    size_t action;  // the action that posted it (for the watchdog)
  };
  Stage<float>& stage(int chunk) { return *chunks_[size_t(chunk)]; }
  Buffer<float> buffer(size_t n);   // a free message buffer (outside a group: it may reclaim one)
  Buffer<float> taken(size_t n);    // inside a group: one of those the run took before it began
  struct MessageBuffers {
    int takes = 0, arrivals = 0;  // buffers a message action takes; of them, those left in the inbox
  };
  MessageBuffers buffers_for(const Action& a) const;
  void peaks(const std::vector<Action>& actions, bool need_grad, std::vector<int>& slots, int& messages) const;
  void recycle();                   // completed outgoing messages give their buffers back
  void drain();                     // every pending send ordered before the kernels after it
  // The receive of (grad?, mb, chunk), its buffer ready to post (nullptr: it comes from this rank
  // itself, already in the inbox). action: the index of the action that posts it, for the watchdog.
  Incoming* expect(bool grad, int mb, int chunk, size_t elems, size_t action);
  void receive(bool grad, int mb, int chunk, size_t elems, size_t action);  // expect + post
  // A message to this rank's own next (previous) chunk goes straight to the inbox: true when it did.
  bool hand_over(bool grad, int mb, int chunk, const float* data, size_t elems);
  // A copy of data to send from (a buffer the run took): valid until the next outgoing().
  Outgoing& outgoing(const float* data, size_t elems);
  // A run of consecutive message actions [first, last), issued in list order as one group; each
  // receive is ordered before the compute that needs it (take), sends finish in the background.
  void communicate(const std::vector<Action>& actions, size_t first, size_t last, const StepIO& io, size_t elems);
  // The message for (grad?, mb, chunk) from the inbox into dst.
  void take(bool grad, int mb, int chunk, float* dst, size_t elems, const StepIO& io);
  std::string describe(const Action& a, size_t index, size_t count, const StepIO& io) const;

  std::vector<Stage<float>*> chunks_;
  Placement placement_;
  int rank_;
  PipelineP2P p2p_;
  Tracer& tracer_;
  bool split_;
  ActivationSlots slots_;
  std::map<MessageKey, Buffer<float>> inbox_;
  std::map<MessageKey, Incoming> incoming_;  // posted receives, waited for by the compute that needs them
  const std::vector<Action>* io_actions_ = nullptr;  // the list run() runs (for the watchdog)
  int step_ = 0;                                     // its step (for the trace)
  std::vector<Outgoing> outgoing_;
  std::vector<Buffer<float>> ready_;  // taken before the group began, for its messages
  size_t sealed_ = 0;  // outgoing_'s first messages, issued in earlier groups (buffer() may wait for them)
  BufferPool<float> messages_;  // messages' own buffers (sent copies, received ones)
};

}  // namespace gpt2
