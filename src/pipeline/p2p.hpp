#pragma once
// The only way activations and their gradients move between pipeline ranks: named operations on
// a (microbatch, chunk) -- send_forward (a forward's output to the next virtual stage),
// recv_forward, send_backward (an input gradient to the previous stage), recv_backward, and the
// paired send_forward_recv_backward / send_backward_recv_forward of 1F1B's steady state.
//
// Each direction of each pair of ranks that exchange has a communicator of its own (a "link": rank
// a -> rank b carries only a's sends and b's receives). NCCL runs a communicator's operations one
// at a time in issue order; on one shared communicator a rank whose receive is queued before its
// send waits for a neighbour doing the same (interleaved and zb-v pipelines hang that way). On a
// link the order is the send order, which the pass-list proof already checks (each rank receives a
// peer's messages in sending order), so every proven list also runs under NCCL's ordering.
// Messages to a chunk of the same rank (the V's turn) never come here: the executor hands them over.
#include <memory>
#include <vector>

#include "pipeline/schedule.hpp"
#include "runtime/communicator.hpp"

namespace gpt2 {

class PipelineP2P {
 public:
  // pipe: the pipeline's communicator (rank == pipeline rank); links are made with its backend,
  // collectively over each pair (every pipeline rank constructs its own at the same time).
  PipelineP2P(Communicator& pipe, const Placement& placement);

  struct Peer {
    int rank, chunk, stage;
  };
  Peer next(int chunk) const;  // where this chunk's activation goes
  Peer prev(int chunk) const;  // where its input gradient goes

  struct Handle {  // an operation in flight on one link
    int link = -1;
    Request request;
    bool pending() const { return request.pending(); }
  };
  // n floats of (mb, chunk): data is the chunk's output (send_forward), its input-gradient
  // (send_backward), or where the message for it lands (the receives). Never to this rank itself.
  Handle send_forward(const float* out, size_t n, int mb, int chunk);
  Handle recv_forward(float* in, size_t n, int mb, int chunk);
  Handle send_backward(const float* dx, size_t n, int mb, int chunk);
  Handle recv_backward(float* dy, size_t n, int mb, int chunk);
  struct Pair {
    Handle send, recv;
  };
  Pair send_forward_recv_backward(const float* out, int mb, int chunk, float* dy, int recv_mb, int recv_chunk, size_t n);
  Pair send_backward_recv_forward(const float* dx, int mb, int chunk, float* in, int recv_mb, int recv_chunk, size_t n);

  void wait(Handle& h);
  bool test(Handle& h);  // true when complete (then h is reset)
  int links() const { return int(links_.size()); }
  int world_rank(int pipeline_rank) const;  // for messages

 private:
  struct Link {
    int from, to;  // pipeline ranks
    std::unique_ptr<Communicator> comm;
  };
  Handle start(bool send, const void* data, size_t n, int peer, bool grad, int mb, int dest_stage);
  int tag(bool grad, int mb, int dest_stage) const;  // the same on both sides (MPI matches on it)

  Communicator& pipe_;
  Placement placement_;
  int rank_;
  std::vector<Link> links_;
};

}  // namespace gpt2
