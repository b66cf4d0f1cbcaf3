#pragma once
// The communicator of a group of one rank (dp = 1, pp = 1, ...): every collective is the identity
// (a copy where the result goes to another buffer), a send-receive with itself is a copy, the
// control plane runs on MPI_COMM_SELF. The engine gets one of these instead of a null pointer.
#include "plugins/communicator.hpp"

namespace gpt2 {

class SerialCommunicator final : public Communicator {
 public:
  std::string backend() const override { return "serial"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  MPI_Comm mpi_comm() const override { return MPI_COMM_SELF; }

  Request iallreduce(void*, size_t, DType, ReduceOp) override { return {}; }
  Request ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp) override;
  Request iall_gather(const void* send, void* recv, size_t count, DType t) override;
  Request isend(const void* buf, size_t count, DType t, int peer, int tag) override;
  Request irecv(void* buf, size_t count, DType t, int peer, int tag) override;
  Request isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                    size_t recv_count, int source, int recv_tag, DType t) override;
  void order_after(Request& r) override { r = {}; }
  bool test(Request& r) override {
    r = {};
    return true;
  }
  void progress() override {}
  void barrier() override {}

 protected:
  void complete(Request& r) override { r = {}; }
};

}  // namespace gpt2
