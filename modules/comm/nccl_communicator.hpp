#pragma once
// Communicator over NCCL with device buffers (CUDA builds). Collectives, sends and receives run on
// three streams of their own (a group's operations on the receive stream), each ordered after the
// Kokkos work issued before them (CUDA events); consumers order the Kokkos stream after an
// operation's event (order_after) instead of waiting on the host. The unique id is broadcast over
// MPI; the communicators of a run are initialised as one NCCL group (init_together), not a chain.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <vector>

#include "plugins/communicator.hpp"

namespace gpt2 {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;
  void group_start() override;
  void group_end() override;
  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm mpi_comm() const override { return control_; }

  Request iallreduce(void* buf, size_t count, DType t, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp op) override;
  Request iall_gather(const void* send, void* recv, size_t count, DType t) override;
  Request isend(const void* buf, size_t count, DType t, int peer, int tag) override;
  Request irecv(void* buf, size_t count, DType t, int peer, int tag) override;
  Request isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                    size_t recv_count, int source, int recv_tag, DType t) override;
  bool test(Request& r) override;
  void order_after(Request& r) override;
  void progress() override {}
  void barrier() override;

  // Runs make_all (which constructs communicators) inside one NCCL group: their initialisations
  // complete together at its end, as NCCL asks of several communicators made by one thread.
  static void init_together(const std::function<void()>& make_all);

 protected:
  void complete(Request& r) override;

 private:
  void release(Request& r);  // the slot back to the pool (its event may be recorded again)
  static void drain();       // device_sync's wait, with the watchdog
  // Ends the job (exit 3) when NCCL reports an asynchronous error on this communicator.
  void check_async(const char* what, std::chrono::steady_clock::time_point since);
  enum Lane { kCollective, kSend, kRecv };  // isendrecv runs on kRecv
  cudaStream_t begin(Lane lane);         // stream of `lane`, ordered after the Kokkos stream
  Request end(Lane lane, const char* what, int peer);  // event recorded after the operation

  struct Op {
    cudaEvent_t done = nullptr;
    const char* what = "";
    int peer = -1;
  };
  ncclComm_t comm_ = nullptr;
  MPI_Comm control_ = MPI_COMM_NULL;  // the control plane (and the unique id's broadcast)
  int rank_ = 0, size_ = 1;
  cudaStream_t streams_[3] = {};
  cudaEvent_t ready_ = nullptr;  // marks the Kokkos stream position at issue time
  // The group being issued, process-wide as NCCL's is (ncclGroupStart spans communicators): its
  // depth and its operations, whose events are recorded once the outermost group_end launched it.
  struct Grouped {
    NcclCommunicator* comm;
    int id;
  };
  static int& group_depth();
  static std::vector<Grouped>& grouped();
  std::vector<Op> ops_;
  std::vector<int> free_;
};

}  // namespace gpt2
