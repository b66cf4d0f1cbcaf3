#pragma once
// Collective and point-to-point communication over one group of ranks. Buffers live in the default
// execution space's memory (device memory in CUDA builds): the NCCL backend uses them directly, the
// MPI backend stages them through host memory when the device memory is not host-accessible.
// Every operation has a non-blocking form returning a Request; wait() completes it. A wait that takes
// longer than the timeout aborts the whole job with a message instead of hanging (a dead peer).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <mpi.h>

namespace gpt2 {

enum class DType { f32, f64, i32, i64 };
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

struct Request {
  int id = -1;  // backend slot; -1: nothing pending
  bool pending() const { return id >= 0; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;  // "mpi" | "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Request iallreduce(void* buf, size_t count, DType t, ReduceOp op) = 0;
  // recv (count) = op over ranks of send[rank*count, (rank+1)*count)
  virtual Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  // recv (size*count) = concatenation of every rank's send (count)
  virtual Request iall_gather(const void* send, void* recv, size_t count, DType t) = 0;
  virtual Request isend(const void* buf, size_t count, DType t, int peer, int tag) = 0;
  virtual Request irecv(void* buf, size_t count, DType t, int peer, int tag) = 0;
  // A send and a receive that complete together: one grouped call under NCCL (so two ranks may
  // exchange, or one rank with itself), MPI_Isendrecv under MPI.
  virtual Request isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                            size_t recv_count, int source, int recv_tag, DType t) = 0;
  virtual void wait(Request& r) = 0;
  // Device work issued from now on runs after r, without the host waiting where the backend can
  // order it on the device (NCCL: stream order); r may stay pending, so wait(r) before the host
  // reads the result. MPI completes r here.
  virtual void order_after(Request& r) { wait(r); }
  virtual bool test(Request& r) = 0;  // true when complete (then r is reset)
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

// backend: "mpi" or "nccl" ("auto" = nccl where built with it, else mpi). The MPI communicator is
// duplicated, so the Communicator owns its own message space.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, MPI_Comm comm);

}  // namespace gpt2
