#include "pipeline/p2p.hpp"

#include <algorithm>
#include <set>

#include "core/error.hpp"

namespace gpt2 {

PipelineP2P::PipelineP2P(Communicator& pipe, const Placement& placement)
    : pipe_(pipe), placement_(placement), rank_(pipe.rank()) {
  std::set<std::pair<int, int>> pairs;  // ranks holding neighbouring stages
  for (int k = 0; k + 1 < placement_.stages(); ++k) {
    const int a = placement_.rank_of(k), b = placement_.rank_of(k + 1);
    if (a != b) pairs.insert({std::min(a, b), std::max(a, b)});
  }
  // Pairs in one order on every rank: each creation is collective over its two ranks only, and the
  // first pair still pending always has both ranks at it, so none waits forever.
  MPI_Group all;
  MPI_Comm_group(pipe_.mpi_comm(), &all);
  int index = 0;
  for (const auto& [a, b] : pairs) {
    ++index;
    if (rank_ != a && rank_ != b) continue;
    const int ranks[2] = {a, b};
    MPI_Group g;
    MPI_Group_incl(all, 2, ranks, &g);
    MPI_Comm pair;
    MPI_Comm_create_group(pipe_.mpi_comm(), g, index % 32768, &pair);
    MPI_Group_free(&g);
    links_.push_back({a, b, make_communicator(pipe_.backend(), pair)});
    links_.push_back({b, a, make_communicator(pipe_.backend(), pair)});
    MPI_Comm_free(&pair);
  }
  MPI_Group_free(&all);
}

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
  if (peer == rank_) fail("pipeline: a message from rank ", rank_, " to itself goes through the inbox, not a link");
  const int from = send ? rank_ : peer, to = send ? peer : rank_;
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& l = links_[i];
    if (l.from != from || l.to != to) continue;
    const int peer_in_link = peer == std::min(from, to) ? 0 : 1;  // the pair's ranks in pipeline order
    Handle h{int(i), Request{}};
    const int t = tag(grad, mb, dest_stage);
    h.request = send ? l.comm->isend(data, n, DType::f32, peer_in_link, t)
                     : l.comm->irecv(const_cast<void*>(data), n, DType::f32, peer_in_link, t);
    return h;
  }
  fail("pipeline: no link from pipeline rank ", from, " to ", to, " (their stages are not neighbours)");
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
PipelineP2P::Pair PipelineP2P::send_forward_recv_backward(const float* out, int mb, int chunk, float* dy, int recv_mb,
                                                          int recv_chunk, size_t n) {
  return {send_forward(out, n, mb, chunk), recv_backward(dy, n, recv_mb, recv_chunk)};
}
PipelineP2P::Pair PipelineP2P::send_backward_recv_forward(const float* dx, int mb, int chunk, float* in, int recv_mb,
                                                          int recv_chunk, size_t n) {
  return {send_backward(dx, n, mb, chunk), recv_forward(in, n, recv_mb, recv_chunk)};
}

void PipelineP2P::wait(Handle& h) {
  if (!h.pending()) return;
  links_[size_t(h.link)].comm->wait(h.request);
}
bool PipelineP2P::test(Handle& h) {
  return !h.pending() || links_[size_t(h.link)].comm->test(h.request);
}

int PipelineP2P::world_rank(int pipeline_rank) const { return world_rank_of(pipe_.mpi_comm(), pipeline_rank); }

}  // namespace gpt2
