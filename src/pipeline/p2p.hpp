#pragma once
// The only way activations and their gradients move between pipeline ranks: named operations on
// a (microbatch, chunk) -- send_forward (a forward's output to the next virtual stage),
// recv_forward, send_backward (an input gradient to the previous stage), recv_backward, and the
// paired exchange_with_next / exchange_with_previous of 1F1B's steady state.
//
// All of them run on the pipeline's one communicator. NCCL runs a rank's operations one at a time
// in issue order, and a send completes only once received: two neighbours that each receive
// before they send would wait for each other forever. So the messages a rank issues together --
// a pass list's run of messages between two computes -- form one group (begin_group/end_group,
// NCCL's grouping, PyTorch's batch_isend_irecv): they start together and complete as one. The
// pass-list proof checks the lists under exactly this model (pipeline/nccl_order: in_order_problem).
// Messages to a chunk of the same rank (the V's turn) never come here: the executor hands them over.
#include "pipeline/schedule.hpp"
#include "plugins/communicator.hpp"

namespace gpt2 {

class PipelineP2P {
 public:
  // pipe: the pipeline's communicator (rank == pipeline rank).
  PipelineP2P(Communicator& pipe, const Placement& placement);

  struct Peer {
    int rank, chunk, stage;
  };
  Peer next(int chunk) const;  // where this chunk's activation goes
  Peer prev(int chunk) const;  // where its input gradient goes

  struct Handle {  // an operation in flight
    Request request;
    bool pending() const { return request.pending(); }
  };
  // The operations issued between the two are one group.
  void begin_group() { pipe_.group_start(); }
  void end_group() { pipe_.group_end(); }
  // n floats of (mb, chunk): data is the chunk's output (send_forward), its input-gradient
  // (send_backward), or where the message for it lands (the receives). Never to this rank itself.
  Handle send_forward(const float* out, size_t n, int mb, int chunk);
  Handle recv_forward(float* in, size_t n, int mb, int chunk);
  Handle send_backward(const float* dx, size_t n, int mb, int chunk);
  Handle recv_backward(float* dy, size_t n, int mb, int chunk);
  struct Pair {
    Handle send, recv;
  };
  // One grouped exchange with one neighbour: to the next stage this chunk's output, from it the
  // gradient of (recv_mb, recv_chunk) (exchange_with_next); to the previous stage the input-gradient,
  // from it the input of (recv_mb, recv_chunk) (exchange_with_previous).
  Pair exchange_with_next(const float* out, int mb, int chunk, float* dy, int recv_mb, int recv_chunk, size_t n);
  Pair exchange_with_previous(const float* dx, int mb, int chunk, float* in, int recv_mb, int recv_chunk, size_t n);

  // The kernels issued afterwards run after h (a stream dependency; MPI completes it here).
  void order_after(Handle& h) { pipe_.order_after(h.request); }
  bool test(Handle& h) { return pipe_.test(h.request); }  // true when complete (then h is reset)
  int world_rank(int pipeline_rank) const;  // for messages

 private:
  Handle start(bool send, const void* data, size_t n, int peer, bool grad, int mb, int dest_stage);
  int tag(bool grad, int mb, int dest_stage) const;  // the same on both sides (MPI matches on it)

  Communicator& pipe_;
  Placement placement_;
  int rank_;
};

}  // namespace gpt2
