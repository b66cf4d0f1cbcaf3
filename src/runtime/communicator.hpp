#pragma once
// Collective and point-to-point communication over one group of ranks.
//
// Data plane: buffers live in the default execution space's memory (device memory in CUDA builds):
// the NCCL backend uses them directly, the MPI backend stages them through host memory when the
// device memory is not host-accessible. Every operation has a non-blocking form returning a Request;
// wait() completes it. A wait that takes longer than the timeout aborts the whole job with a message
// instead of hanging (a dead peer).
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

#include "runtime/registry.hpp"

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
  // A send and a receive that complete together: one grouped call under NCCL (so two ranks may
  // exchange, or one rank with itself), an Irecv + Isend pair under MPI.
  virtual Request isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                            size_t recv_count, int source, int recv_tag, DType t) = 0;
  virtual void wait(Request& r) = 0;
  // Device work issued from now on runs after r, without the host waiting where the backend can
  // order it on the device (NCCL: stream order); r may stay pending, so wait(r) before the host
  // reads the result. MPI completes r here.
  virtual void order_after(Request& r) { wait(r); }
  virtual bool test(Request& r) = 0;  // true when complete (then r is reset)
  // Operations run one at a time in issue order and a send completes only once received (NCCL,
  // mpi-ordered): sends and receives that must progress together have to be one group.
  virtual bool ordered() const { return false; }
  // The point-to-point operations issued between the two start together and complete as one (NCCL's
  // ncclGroupStart / ncclGroupEnd); a Request of the group completes when the whole group has on an
  // ordered communicator. No-ops where operations are independent (MPI).
  virtual void group_start() {}
  virtual void group_end() {}
  virtual void progress() = 0;        // drive outstanding operations (MPI has no progress thread)
  virtual void barrier() = 0;

  void allreduce(void* buf, size_t count, DType t, ReduceOp op) {
    Request r = iallreduce(buf, count, t, op);
    wait(r);
  }
  void send(const void* buf, size_t count, DType t, int peer, int tag) {
    Request r = isend(buf, count, t, peer, tag);
    wait(r);
  }
  void recv(void* buf, size_t count, DType t, int peer, int tag) {
    Request r = irecv(buf, count, t, peer, tag);
    wait(r);
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
};

// Host-side helpers over an MPI communicator, for small control values (loss, norms, flags).
// Like every wait here, they abort the job after the timeout instead of hanging on a dead peer.
double allreduce_sum(MPI_Comm comm, double x);
int64_t allreduce_max(MPI_Comm comm, int64_t x);
// Completes an MPI request, polling; after Communicator::timeout_seconds() prints which operation
// (and peer) it waited for and calls MPI_Abort.
void mpi_wait(MPI_Request& r, const char* what, int peer = -1);
// Called while any wait spins: moves operations that run on their own on a device (the
// mpi-ordered backend sets it, so queued operations of every communicator start while a rank waits
// on one -- as NCCL's streams go on while the host blocks).
void set_background_progress(void (*progress)());
void background_progress();

// What this rank is doing while it may wait, for the watchdog's message: a scope that names it
// (the pipeline's pass and peer, say). Scopes nest; the text is made only when a wait times out.
class WaitContext {
 public:
  explicit WaitContext(std::function<std::string()> describe);
  ~WaitContext();
  WaitContext(const WaitContext&) = delete;
  WaitContext& operator=(const WaitContext&) = delete;
  static std::string describe();  // the open scopes, outermost first ("" when none)
};
// The watchdog's end: prints "error: rank R waited S s for WHAT (CONTEXT)" and what to do next, gives
// the other stuck ranks a grace period to say what they wait for, then aborts the job with exit 3.
[[noreturn]] void abort_on_hang(double waited, const std::string& what);
// The world rank of rank `rank` of communicator comm (for messages).
int world_rank_of(MPI_Comm comm, int rank);

// ---- the backend registry (modules/comm) ----
struct CommContext {
  int local_size = 1;  // ranks on this node
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
};
using CommRegistry = Registry<CommBackend>;

// The concrete backend `choice` (parallel.comm) stands for here; InputError for an unknown one.
const CommBackend& resolve_comm_backend(const std::string& choice, const CommContext& ctx);
// A communicator of backend `name` ("auto" resolved for one rank per node) over comm.
std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm comm);

}  // namespace gpt2
