#include "modules/comm/nccl_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "runtime/device_sync.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

namespace {
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL ", what, ": ", ncclGetErrorString(r));
}
void check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) fail("CUDA ", what, ": ", cudaGetErrorString(r));
}
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::bf16: return ncclBfloat16;  // NCCL >= 2.10; sums in fp32 internally
    default: return ncclInt64;
  }
}
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    default: return ncclMax;
  }
}
std::vector<NcclCommunicator*>& live() {
  static std::vector<NcclCommunicator*> all;
  return all;
}
}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm) {
  MPI_Comm_dup(comm, &control_);
  MPI_Comm_rank(control_, &rank_);
  MPI_Comm_size(control_, &size_);
  ncclUniqueId id;
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  host_broadcast(&id, sizeof(id), 0);
  check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  for (auto& s : streams_) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "event");
  live().push_back(this);
  set_device_drain(&NcclCommunicator::drain);
}

// A whole-device wait with the watchdog: the host polls an event behind every stream's work (the
// Kokkos stream and each communicator's) instead of blocking in cudaDeviceSynchronize, so a dead
// peer ends the job with a message instead of a hang.
void NcclCommunicator::drain() {
  std::vector<cudaEvent_t> marks;
  auto mark = [&](cudaStream_t s) {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
    check(cudaEventRecord(e, s), "cudaEventRecord");
    marks.push_back(e);
  };
  mark(Kokkos::Cuda().cuda_stream());
  for (NcclCommunicator* c : live())
    for (cudaStream_t s : c->streams_) mark(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (cudaEvent_t e : marks) {
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) check(q, "cudaEventQuery");
      if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(10));
      for (NcclCommunicator* c : live()) c->check_async("a whole-device wait", t0);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > timeout_seconds()) {
        for (NcclCommunicator* c : live())
          if (c->comm_) ncclCommAbort(c->comm_), c->comm_ = nullptr;
        abort_on_hang(waited, "a whole-device wait: the device's work (its communication included) never completed");
      }
    }
  }
  for (cudaEvent_t e : marks) cudaEventDestroy(e);
}

void NcclCommunicator::check_async(const char* what, std::chrono::steady_clock::time_point since) {
  ncclResult_t async = ncclSuccess;
  if (comm_) ncclCommGetAsyncError(comm_, &async);
  if (async == ncclSuccess) return;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const std::string context = WaitContext::describe();
  std::fprintf(stderr, "error: rank %d: NCCL %s failed after %.0f s (%s)%s%s; aborting the job.\n", world, what, waited,
               ncclGetErrorString(async), context.empty() ? "" : " while ", context.c_str());
  std::fflush(stderr);
  ncclCommAbort(comm_);
  comm_ = nullptr;
  MPI_Abort(MPI_COMM_WORLD, 3);
}

NcclCommunicator::~NcclCommunicator() {
  auto& all = live();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
  for (Op& op : ops_)
    if (op.done) cudaEventDestroy(op.done);
  if (ready_) cudaEventDestroy(ready_);
  for (auto& s : streams_)
    if (s) cudaStreamDestroy(s);
  if (comm_) ncclCommDestroy(comm_);
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

// A group's operations all go to one stream (kRecv) and are launched by ncclGroupEnd: their events
// can only be recorded after it.
int& NcclCommunicator::group_depth() {
  static int depth = 0;
  return depth;
}
std::vector<NcclCommunicator::Grouped>& NcclCommunicator::grouped() {
  static std::vector<Grouped> ops;
  return ops;
}

void NcclCommunicator::group_start() {
  ++group_depth();  // (nested, e.g. isendrecv inside a group: NCCL counts the depth too)
  check(ncclGroupStart(), "ncclGroupStart");
}

// The group's kernels are enqueued by the outermost ncclGroupEnd, each on its communicator's receive
// stream: those streams wait, just before, for all the Kokkos work issued so far (a buffer copied
// into inside the group included).
void NcclCommunicator::group_end() {
  if (group_depth() == 0) fail("NCCL communicator: group_end without group_start");
  std::vector<NcclCommunicator*> comms;
  for (const Grouped& g : grouped())
    if (std::find(comms.begin(), comms.end(), g.comm) == comms.end()) comms.push_back(g.comm);
  if (group_depth() == 1)
    for (NcclCommunicator* c : comms) {
      check(cudaEventRecord(c->ready_, Kokkos::Cuda().cuda_stream()), "cudaEventRecord");
      check(cudaStreamWaitEvent(c->streams_[kRecv], c->ready_, 0), "cudaStreamWaitEvent");
    }
  check(ncclGroupEnd(), "ncclGroupEnd");
  if (--group_depth() > 0) return;
  for (const Grouped& g : grouped())
    check(cudaEventRecord(g.comm->ops_[size_t(g.id)].done, g.comm->streams_[kRecv]), "cudaEventRecord");
  grouped().clear();
}

void NcclCommunicator::init_together(const std::function<void()>& make_all) {
  check(ncclGroupStart(), "ncclGroupStart (initialisation)");
  make_all();
  check(ncclGroupEnd(), "ncclGroupEnd (initialisation)");
}

cudaStream_t NcclCommunicator::begin(Lane lane) {
  if (group_depth() > 0) return streams_[kRecv];
  check(cudaEventRecord(ready_, Kokkos::Cuda().cuda_stream()), "cudaEventRecord");
  check(cudaStreamWaitEvent(streams_[lane], ready_, 0), "cudaStreamWaitEvent");
  return streams_[lane];
}

Request NcclCommunicator::end(Lane lane, const char* what, int peer) {
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = int(ops_.size());
    ops_.push_back({});
    check(cudaEventCreateWithFlags(&ops_[id].done, cudaEventDisableTiming), "event");
  }
  ops_[id].what = what;
  ops_[id].peer = peer;
  if (group_depth() > 0)
    grouped().push_back({this, id});
  else
    check(cudaEventRecord(ops_[id].done, streams_[lane]), "cudaEventRecord");
  return Request{id};
}

Request NcclCommunicator::iallreduce(void* buf, size_t count, DType t, ReduceOp op) {
  cudaStream_t s = begin(kCollective);
  check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), comm_, s), "ncclAllReduce");
  return end(kCollective, "all-reduce", -1);
}

Request NcclCommunicator::ireduce_scatter(const void* send, void* recv, size_t count, DType t,
                                          ReduceOp op) {
  cudaStream_t s = begin(kCollective);
  check(ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), comm_, s),
        "ncclReduceScatter");
  return end(kCollective, "reduce-scatter", -1);
}

Request NcclCommunicator::iall_gather(const void* send, void* recv, size_t count, DType t) {
  cudaStream_t s = begin(kCollective);
  check(ncclAllGather(send, recv, count, nccl_type(t), comm_, s), "ncclAllGather");
  return end(kCollective, "all-gather", -1);
}

// NCCL has no tags: messages between a pair are matched in issue order, which the pipeline
// schedules keep identical on both sides.
Request NcclCommunicator::isend(const void* buf, size_t count, DType t, int peer, int) {
  cudaStream_t s = begin(kSend);
  check(ncclSend(buf, count, nccl_type(t), peer, comm_, s), "ncclSend");
  return end(kSend, "send", peer);
}

Request NcclCommunicator::irecv(void* buf, size_t count, DType t, int peer, int) {
  cudaStream_t s = begin(kRecv);
  check(ncclRecv(buf, count, nccl_type(t), peer, comm_, s), "ncclRecv");
  return end(kRecv, "receive", peer);
}

Request NcclCommunicator::isendrecv(const void* send, size_t send_count, int dest, int, void* recv,
                                    size_t recv_count, int source, int, DType t) {
  group_start();
  cudaStream_t s = begin(kRecv);
  check(ncclSend(send, send_count, nccl_type(t), dest, comm_, s), "ncclSend");
  check(ncclRecv(recv, recv_count, nccl_type(t), source, comm_, s), "ncclRecv");
  Request r = end(kRecv, "send-receive", source);
  group_end();
  return r;
}

void NcclCommunicator::release(Request& r) {
  free_.push_back(r.id);
  r.id = -1;
}

bool NcclCommunicator::test(Request& r) {
  if (!r.pending()) return true;
  // An operation of the open group has no event recorded yet (querying one reports "done").
  for (const Grouped& g : grouped())
    if (g.comm == this && g.id == r.id) return false;
  const cudaError_t e = cudaEventQuery(ops_[r.id].done);
  if (e == cudaErrorNotReady) return false;
  check(e, "cudaEventQuery");
  // Later Kokkos work reads the result: order the Kokkos stream after it (no host round trip).
  check(cudaStreamWaitEvent(Kokkos::Cuda().cuda_stream(), ops_[r.id].done, 0), "cudaStreamWaitEvent");
  release(r);
  return true;
}

// The wait captures the event's state now: the slot (and its event) may be reused at once.
void NcclCommunicator::order_after(Request& r) {
  if (!r.pending()) return;
  if (group_depth() > 0) fail("NCCL communicator: order_after inside a group (its events are recorded at group_end)");
  check(cudaStreamWaitEvent(Kokkos::Cuda().cuda_stream(), ops_[r.id].done, 0), "cudaStreamWaitEvent");
  release(r);
}

void NcclCommunicator::complete(Request& r) {
  if (!r.pending()) return;
  if (group_depth() > 0) fail("NCCL communicator: a host wait inside a group (its operations start at group_end)");
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; !test(r); ++spins) {
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(10));
    check_async(ops_[r.id].what, t0);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_seconds()) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      abort_on_hang(waited, std::string("the NCCL ") + ops_[r.id].what);
    }
  }
}

void NcclCommunicator::barrier() {
  // An all-reduce of one int is a barrier on the device; wait() makes it one for the host too.
  int* flag = static_cast<int*>(Kokkos::kokkos_malloc<Kokkos::CudaSpace>("barrier", sizeof(int)));
  Request r = iallreduce(flag, 1, DType::i32, ReduceOp::sum);
  wait(r);
  Kokkos::kokkos_free<Kokkos::CudaSpace>(flag);
}

}  // namespace gpt2
