#pragma once
// Communicator over MPI with host buffers. In CUDA builds device buffers are staged through host
// memory (the path used for several ranks sharing one GPU, where NCCL refuses to run).
//
// Ordered (parallel.comm = "mpi-ordered"): a GPU's view of NCCL on the host, to find on a CPU the
// hangs and races a GPU run would have. Every ordered communicator of the process feeds one queue --
// the device's -- whose operations start on the wire one at a time in issue order, each once every
// earlier one has completed (NCCL guarantees no more across communicators); the operations issued
// between group_start() and group_end(), on any ordered communicator, are one entry and start
// together (an NCCL group); a send completes only once its receive is posted (MPI_Issend: NCCL's
// point-to-point); a whole-device wait (device_sync) drains the queue. So two ranks that each post
// a receive before their send, ungrouped, deadlock here as they would on two GPUs, and the watchdog
// names both waits.
// The host runs ahead of this device as a GPU's host does: order_after never blocks -- the "stream"
// catches up on what it was ordered after only when the next device work is issued (a kernel, a
// copy, a GEMM: tensor/device_work) -- and test() sees an operation complete only once the device
// has done GPT2_DEVICE_LAG more operations (default 1024) after it, so code that reuses a buffer
// when a send "looks finished" takes its other path here too. As on NCCL, nothing may wait inside
// an open group (order_after or wait there is an error).
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "plugins/communicator.hpp"

namespace gpt2 {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool issue_order = false);  // duplicates comm
  ~MpiCommunicator() override;
  std::string backend() const override { return issue_order_ ? "mpi-ordered" : "mpi"; }
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
  // MPI's data is on the host: completed here (plain), or when the next device work is issued (ordered).
  void order_after(Request& r) override;
  bool test(Request& r) override;
  void progress() override;
  void barrier() override;

 protected:
  void complete(Request& r) override;

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
    uint64_t retired_at = 0;  // ordered: the device's clock then (test() sees it DEVICE_LAG later)
  };
  struct Queued {  // ordered: an operation in the device's queue
    MpiCommunicator* comm;
    int id;
  };
  using Group = std::vector<Queued>;
  Request start(Op op);
  // Sets o up to receive count values into buf; returns where MPI writes (buf, or host staging
  // that finish() copies to buf).
  static void* receive_into(Op& o, void* buf, size_t count, DType t, int peer);
  void finish(Op& op);  // copy back / average, once the MPI request completed
  bool poll(Op& op);
  // ordered: the device's queue of groups (every ordered communicator's), oldest first, and the
  // group being issued (its depth: groups nest, as NCCL's do).
  static std::deque<Group>& queue();
  static Group& issuing();
  static int& depth();
  static void advance();  // completes the oldest groups in order, starting each next one
  static void advance_queue();
  static void drain();    // a whole-device wait: every queued group completed
  // ordered: the operations the compute stream was ordered after and has not caught up on yet;
  // the device's clock (device work issued, host polls); how far test() lags behind it.
  static std::vector<Queued>& stream_waits();
  static uint64_t& device_clock();
  static uint64_t device_lag();
  static void catch_up();  // device work is about to be issued: the stream waits first (the hook)
  void await_retired(int id);  // spins until operation id's group completed (watchdog)
  void release(Request& r);    // the slot back to the free list
  void refuse_in_group(const char* what) const;  // NCCL's rule: nothing waits inside an open group
  // "the receive with peer P (world rank W)": for the watchdog.
  std::string describe(const Op& op) const;
  [[noreturn]] void hang(double waited, const Op& op) const;

  MPI_Comm comm_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;  // data plane; control plane
  int rank_ = 0, size_ = 1;
  std::vector<Op> ops_;
  std::vector<int> free_;
  bool issue_order_ = false;
};

}  // namespace gpt2
