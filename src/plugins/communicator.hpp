#pragma once
// Collective and point-to-point communication over one group of ranks: the interface the backends
// of modules/comm implement (the control plane and the watchdog are runtime/'s: communicator.cpp,
// watchdog.hpp).
//
// Data plane: buffers live in the default execution space's memory (device memory in CUDA builds):
// the NCCL backend uses them directly, the MPI backend stages them through host memory when the
// device memory is not host-accessible. Every operation has a non-blocking form returning a Request.
// A consumer inside a training step completes it one way: order_after(r), a stream dependency
// (device work issued afterwards runs after r; the host blocks only where the backend itself runs
// on the host, as MPI does). wait(r) blocks the host until r is done, for where the host needs the
// bytes itself (between steps); it is counted (tensor/device_counters), and a step makes none.
// A wait that takes longer than the timeout aborts the whole job with a message instead of hanging
// (a dead peer).
//
// Ordering (NCCL's, which mpi-ordered models on the host): a rank's operations, on all its
// communicators, run one at a time in issue order, a send completes only once received, and the
// operations issued between group_start() and group_end() -- on any communicator -- start together
// and complete as one. So two ranks that exchange must issue both directions as one group.
//
// Control plane: small host-memory messages (scalars, per-rank summaries, trace metadata,
// checkpoint pieces), blocking, on the group's MPI communicator, with the same watchdog.
//
// Backends register themselves (modules/comm: mpi, nccl, auto); a group of one rank gets the
// engine's SerialCommunicator, so callers never test for a missing communicator.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plugins/registry.hpp"
#include "tensor/device_counters.hpp"

namespace gpt2 {

// bf16: gradient reductions on the wire at half the bytes (parallel.grad_reduce_dtype); sums and
// averages of bf16 add in fp32 and round back (MPI: a user-defined operation; NCCL: ncclBfloat16).
enum class DType { f32, f64, i32, i64, bf16 };
enum class ReduceOp { sum, avg, max };

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::i64; }
size_t dtype_size(DType t);
MPI_Datatype mpi_datatype(DType t);

struct Request {
  int id = -1;  // backend slot; -1: nothing pending
  bool pending() const { return id >= 0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi" | "nccl" | "serial"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The MPI communicator of the control plane over the same ranks (MPI_COMM_SELF when serial);
  // also what a library that needs one (parallel HDF5) is given.
  virtual MPI_Comm mpi_comm() const = 0;

  // ---- data plane (device buffers) ----
  virtual Request iallreduce(void* buf, size_t count, DType t, ReduceOp op) = 0;
  // recv (count) = op over ranks of send[rank*count, (rank+1)*count)
  virtual Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  // recv (size*count) = concatenation of every rank's send (count)
  virtual Request iall_gather(const void* send, void* recv, size_t count, DType t) = 0;
  virtual Request isend(const void* buf, size_t count, DType t, int peer, int tag) = 0;
  virtual Request irecv(void* buf, size_t count, DType t, int peer, int tag) = 0;
  // A send and a receive issued as one group (so two ranks may exchange, or one rank with itself).
  virtual Request isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                            size_t recv_count, int source, int recv_tag, DType t) = 0;
  // The one way a consumer inside a step completes an operation: device work issued from now on
  // runs after r (NCCL: the compute stream waits on the operation's event, the host goes on; MPI:
  // completed here, on the host, where its data is). r is done with afterwards.
  virtual void order_after(Request& r) = 0;
  // Blocks the host until r is done: only where the host reads the bytes itself. Counted.
  void wait(Request& r) {
    if (!r.pending()) return;
    count_host_wait();
    complete(r);
  }
  virtual bool test(Request& r) = 0;  // true when complete (then r is reset); never blocks
  // The operations issued from group_start() to group_end(), on any communicator of this backend,
  // start together and complete as one (NCCL's ncclGroupStart / ncclGroupEnd): a Request of the
  // group completes when the whole group has. No-ops where operations are independent (MPI).
  virtual void group_start() {}
  virtual void group_end() {}
  virtual void progress() = 0;        // drive outstanding operations (MPI has no progress thread)
  virtual void barrier() = 0;

  // Issued and ordered before the device work that follows (order_after).
  void allreduce(void* buf, size_t count, DType t, ReduceOp op) {
    Request r = iallreduce(buf, count, t, op);
    order_after(r);
  }
  void send(const void* buf, size_t count, DType t, int peer, int tag) {
    Request r = isend(buf, count, t, peer, tag);
    order_after(r);
  }
  void recv(void* buf, size_t count, DType t, int peer, int tag) {
    Request r = irecv(buf, count, t, peer, tag);
    order_after(r);
  }

  // ---- control plane (host memory, blocking) ----
  void host_allreduce(void* buf, size_t count, DType t, ReduceOp op);
  void host_all_gather(const void* send, void* recv, size_t bytes);  // `bytes` from every rank
  void host_broadcast(void* buf, size_t bytes, int root);
  void host_send(const void* buf, size_t bytes, int peer, int tag);
  void host_recv(void* buf, size_t bytes, int peer, int tag);
  template <class T>
  T host_sum(T x) {
    host_allreduce(&x, 1, dtype_of<T>(), ReduceOp::sum);
    return x;
  }
  template <class T>
  T host_max(T x) {
    host_allreduce(&x, 1, dtype_of<T>(), ReduceOp::max);
    return x;
  }
  // Every rank's value of a trivially copyable T, by rank.
  template <class T>
  std::vector<T> host_gather_all(const T& mine) {
    std::vector<T> all(static_cast<size_t>(size()));
    host_all_gather(&mine, all.data(), sizeof(T));
    return all;
  }

  // Seconds a wait may block before the job is aborted (GPT2_COMM_TIMEOUT, default 600).
  static double timeout_seconds();

 protected:
  virtual void complete(Request& r) = 0;  // blocks the host until r is done
};

// ---- the backend registry (modules/comm) ----
struct CommContext {
  int local_size = 1;  // ranks on this node
  int local_rank = 0;  // this rank among them (the one of rank 0 speaks for the node)
  int gpus = -1;       // GPUs its ranks see (-1: ask the device runtime)
};
struct CommBackend {
  std::string name, help;
  int order = 0;
  // A communicator over `comm` (duplicated: it owns its message space). Empty for a choice that
  // only stands for another (auto).
  std::function<std::unique_ptr<Communicator>(MPI_Comm)> make;
  // The backend this choice means on this machine: its own name, or (auto) another entry's.
  std::function<std::string(const CommContext&)> resolve;
  double bucket_mb = 1;  // default gradient bucket size in MiB (parallel.bucket_mb = 0)
  // Runs make_all, which makes this backend's communicators of a run, so that they initialise
  // together (NCCL: one group) rather than one after another; empty: make_all() as it is.
  std::function<void(const std::function<void()>& make_all)> init_together;
};
using CommRegistry = Registry<CommBackend>;

// The concrete backend `choice` (parallel.comm) stands for here; InputError for an unknown one.
const CommBackend& resolve_comm_backend(const std::string& choice, const CommContext& ctx);
// A communicator of backend `name` ("auto" resolved for one rank per node) over comm.
std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm comm);

}  // namespace gpt2
