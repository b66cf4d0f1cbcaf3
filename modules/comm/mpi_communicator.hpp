#pragma once
// Communicator over MPI with host buffers. In CUDA builds device buffers are staged through host
// memory (the path used for several ranks sharing one GPU, where NCCL refuses to run).
//
// Ordered (parallel.comm = "mpi-ordered"): NCCL's semantics on the host, to find on a CPU the hangs a
// GPU run would have. A communicator runs its operations one at a time in issue order (an operation
// starts on the wire once every earlier one has completed, as on NCCL's stream), a send completes
// only once its receive is posted (MPI_Issend: NCCL's point-to-point), and only isendrecv's send and
// receive start together (an NCCL group). So a receive posted before a send, both neighbours
// waiting in their receive, deadlocks here as it would on two GPUs.
#include <deque>
#include <functional>
#include <vector>

#include "runtime/communicator.hpp"

namespace gpt2 {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool ordered = false);  // duplicates comm
  ~MpiCommunicator() override;
  std::string backend() const override { return ordered_ ? "mpi-ordered" : "mpi"; }
  bool ordered() const override { return ordered_; }
  void group_start() override;
  void group_end() override;
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
  void progress() override;
  void barrier() override;

 private:
  struct Op {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Request send_req = MPI_REQUEST_NULL;  // isendrecv's send (req is its receive)
    bool done = false;
    const char* what = "";
    int peer = -1;
    std::vector<char> staging;  // host copy when the buffer is not host-accessible
    std::vector<char> send_staging;  // isendrecv's outgoing host copy (staging holds the incoming)
    void* result = nullptr;     // where the result goes (device or host buffer)
    size_t result_count = 0;
    DType type = DType::f32;
    bool average = false;       // divide by size() on completion
    std::function<void(Op&)> post;  // starts it on the wire (ordered: once every earlier op completed)
    bool retired = false;  // ordered: its whole group completed (only then may its slot be reused)
  };
  Request start(Op op);
  // Sets o up to receive count values into buf; returns where MPI writes (buf, or host staging
  // that finish() copies to buf).
  static void* receive_into(Op& o, void* buf, size_t count, DType t, int peer);
  void finish(Op& op);  // copy back / average, once the MPI request completed
  bool poll(Op& op);
  static void advance_all();  // ordered: advance() every ordered communicator of the process
  void advance();  // ordered: completes the oldest operations in order, starting each next one

  MPI_Comm comm_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;  // data plane; control plane
  int rank_ = 0, size_ = 1;
  std::vector<Op> ops_;
  std::vector<int> free_;
  bool ordered_ = false;
  std::deque<std::vector<int>> queue_;  // ordered: groups of operations not yet complete, oldest first
  bool in_group_ = false;
  std::vector<int> group_;  // ordered: the group being issued
};

}  // namespace gpt2
