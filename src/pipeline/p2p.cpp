#include "pipeline/p2p.hpp"

#include "core/error.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

PipelineP2P::PipelineP2P(Communicator& pipe, const Placement& placement)
    : pipe_(pipe), placement_(placement), rank_(pipe.rank()) {}

PipelineP2P::Peer PipelineP2P::next(int chunk) const {
  const int k = placement_.stage(rank_, chunk) + 1;
  return {placement_.rank_of(k), placement_.chunk_of(k), k};
}
PipelineP2P::Peer PipelineP2P::prev(int chunk) const {
  const int k = placement_.stage(rank_, chunk) - 1;
  return {placement_.rank_of(k), placement_.chunk_of(k), k};
}

// A message's tag names its kind, microbatch and destination stage. MPI matches on it; NCCL, which
// has none, matches in issue order on the link (the schedules receive in sending order).
int PipelineP2P::tag(bool grad, int mb, int dest_stage) const {
  return (2 * (mb * placement_.stages() + dest_stage) + int(grad)) % 32768;
}

PipelineP2P::Handle PipelineP2P::start(bool send, const void* data, size_t n, int peer, bool grad, int mb,
                                       int dest_stage) {
  if (peer == rank_) fail("pipeline: a message from rank ", rank_, " to itself goes through the inbox, not the communicator");
  const int t = tag(grad, mb, dest_stage);
  return {send ? pipe_.isend(data, n, DType::f32, peer, t) : pipe_.irecv(const_cast<void*>(data), n, DType::f32, peer, t)};
}

PipelineP2P::Handle PipelineP2P::send_forward(const float* out, size_t n, int mb, int chunk) {
  const Peer to = next(chunk);
  return start(true, out, n, to.rank, false, mb, to.stage);
}
PipelineP2P::Handle PipelineP2P::recv_forward(float* in, size_t n, int mb, int chunk) {
  return start(false, in, n, prev(chunk).rank, false, mb, placement_.stage(rank_, chunk));
}
PipelineP2P::Handle PipelineP2P::send_backward(const float* dx, size_t n, int mb, int chunk) {
  const Peer to = prev(chunk);
  return start(true, dx, n, to.rank, true, mb, to.stage);
}
PipelineP2P::Handle PipelineP2P::recv_backward(float* dy, size_t n, int mb, int chunk) {
  return start(false, dy, n, next(chunk).rank, true, mb, placement_.stage(rank_, chunk));
}
PipelineP2P::Pair PipelineP2P::exchange_with_next(const float* out, int mb, int chunk, float* dy, int recv_mb,
                                                          int recv_chunk, size_t n) {
  begin_group();
  Pair p{send_forward(out, n, mb, chunk), recv_backward(dy, n, recv_mb, recv_chunk)};
  end_group();
  return p;
}
PipelineP2P::Pair PipelineP2P::exchange_with_previous(const float* dx, int mb, int chunk, float* in, int recv_mb,
                                                          int recv_chunk, size_t n) {
  begin_group();
  Pair p{send_backward(dx, n, mb, chunk), recv_forward(in, n, recv_mb, recv_chunk)};
  end_group();
  return p;
}

int PipelineP2P::world_rank(int pipeline_rank) const { return world_rank_of(pipe_.mpi_comm(), pipeline_rank); }

}  // namespace gpt2
