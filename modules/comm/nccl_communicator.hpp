#pragma once
// Communicator over NCCL with device buffers (CUDA builds). Collectives, sends and receives run on
// three streams of their own (a grouped send + receive on the receive stream), each ordered after
// the Kokkos work issued before them (CUDA events), so a send never queues behind a receive. The
// unique id is broadcast over MPI.
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

#include "runtime/communicator.hpp"

namespace gpt2 {

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;
  bool ordered() const override { return true; }
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
  void wait(Request& r) override;
  bool test(Request& r) override;
  void order_after(Request& r) override;
  void progress() override {}
  void barrier() override;

 private:
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
  bool in_group_ = false;
  std::vector<int> group_;  // the group's requests: their events are recorded once it is launched
  std::vector<Op> ops_;
  std::vector<int> free_;
};

}  // namespace gpt2
