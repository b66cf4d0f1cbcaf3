#include "modules/comm/mpi_communicator.hpp"

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.hpp"
#include "runtime/device_sync.hpp"
#include "tensor/device_work.hpp"
#include "tensor/half.hpp"
#include "tensor/views.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

namespace {

constexpr bool kHostAccessible = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
using DevBytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryUnmanaged>;

// bf16 sums: each pair added in fp32 and rounded back to bf16 (MPI has no bf16 type or sum).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16(float(a[i]) + float(b[i]));
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::bf16) {
    if (op == ReduceOp::max) fail("MPI communicator: no bf16 max");
    static MPI_Op sum = [] {  // made once, after MPI_Init (at the first bf16 reduction); kept to the end
      MPI_Op o;
      MPI_Op_create(&bf16_sum, 1, &o);
      return o;
    }();
    return sum;
  }
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

// Device buffers staged through the host (CUDA builds): copies on the execution space, after the
// kernels that wrote them, then a wait for that space alone (MPI reads the copy from the host).
void to_host(std::vector<char>& dst, const void* src, size_t bytes) {
  dst.resize(bytes);
  Kokkos::deep_copy(ExecSpace(), HostBytes(dst.data(), bytes), DevBytes(static_cast<char*>(const_cast<void*>(src)), bytes));
  ExecSpace().fence();
}
void to_device(void* dst, const std::vector<char>& src, size_t bytes) {
  Kokkos::deep_copy(ExecSpace(), DevBytes(static_cast<char*>(dst), bytes), HostBytes(const_cast<char*>(src.data()), bytes));
  ExecSpace().fence();  // (the staging buffer is freed next)
}

template <class T>
void scale(void* p, size_t n, double f) {
  T* x = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) x[i] = T(x[i] * f);
}
template <>
void scale<bf16>(void* p, size_t n, double f) {
  bf16* x = static_cast<bf16*>(p);
  for (size_t i = 0; i < n; ++i) x[i] = bf16(float(x[i]) * float(f));
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool issue_order) : issue_order_(issue_order) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_dup(comm, &control_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  if (issue_order_) {
    set_background_progress(&MpiCommunicator::advance);
    set_device_drain(&MpiCommunicator::drain);
    set_device_work_hook(&MpiCommunicator::catch_up);
  }
}

MpiCommunicator::~MpiCommunicator() {
  if (issue_order_) {  // nothing of this communicator stays queued (a run that failed may leave some)
    auto mine = [this](const Queued& q) { return q.comm == this; };
    for (Group& g : queue()) g.erase(std::remove_if(g.begin(), g.end(), mine), g.end());
    queue().erase(std::remove_if(queue().begin(), queue().end(), [](const Group& g) { return g.empty(); }),
                  queue().end());
    issuing().erase(std::remove_if(issuing().begin(), issuing().end(), mine), issuing().end());
    stream_waits().erase(std::remove_if(stream_waits().begin(), stream_waits().end(), mine), stream_waits().end());
  }
  for (Op& op : ops_)
    for (MPI_Request* r : {&op.req, &op.send_req})
      if (*r != MPI_REQUEST_NULL) MPI_Request_free(r);
  for (MPI_Comm* c : {&comm_, &control_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

Request MpiCommunicator::start(Op op) {
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    ops_[id] = std::move(op);
  } else {
    id = int(ops_.size());
    ops_.push_back(std::move(op));
  }
  if (issue_order_ && depth() > 0) {
    issuing().push_back({this, id});
  } else if (issue_order_) {
    queue().push_back({{this, id}});
    advance();
  } else if (ops_[size_t(id)].post) {
    std::function<void(Op&)> post = std::move(ops_[size_t(id)].post);
    ops_[size_t(id)].post = nullptr;
    post(ops_[size_t(id)]);
  }
  return Request{id};
}

Request MpiCommunicator::iallreduce(void* buf, size_t count, DType t, ReduceOp op) {
  const size_t bytes = count * dtype_size(t);
  Op o;
  o.what = "all-reduce";
  o.result = buf;
  o.result_count = count;
  o.type = t;
  o.average = op == ReduceOp::avg && size_ > 1;
  if (!kHostAccessible) to_host(o.staging, buf, bytes);
  if (size_ > 1)
    o.post = [this, buf, count, t, op](Op& self) {
      void* p = kHostAccessible ? buf : static_cast<void*>(self.staging.data());
      MPI_Iallreduce(MPI_IN_PLACE, p, int(count), mpi_datatype(t), mpi_op(op, t), comm_, &self.req);
    };
  return start(std::move(o));
}

Request MpiCommunicator::ireduce_scatter(const void* send, void* recv, size_t count, DType t,
                                         ReduceOp op) {
  const size_t bytes = count * dtype_size(t);
  Op o;
  o.what = "reduce-scatter";
  o.result = recv;
  o.result_count = count;
  o.type = t;
  o.average = op == ReduceOp::avg && size_ > 1;
  const void* s = send;
  void* r = recv;
  std::vector<char> send_host;
  if (!kHostAccessible) {
    to_host(send_host, send, bytes * size_);
    o.staging.resize(bytes);
    s = send_host.data(), r = o.staging.data();
  }
  // MPI copies the send buffer before Ireduce_scatter_block returns? Not guaranteed: keep it alive
  // by blocking here when staged (rare path: CUDA build without NCCL).
  if (!kHostAccessible) {
    MPI_Reduce_scatter_block(s, r, int(count), mpi_datatype(t), mpi_op(op, t), comm_);
    o.done = true;
    finish(o);
    return start(std::move(o));
  }
  o.post = [this, s, r, count, t, op](Op& self) {
    MPI_Ireduce_scatter_block(s, r, int(count), mpi_datatype(t), mpi_op(op, t), comm_, &self.req);
  };
  return start(std::move(o));
}

Request MpiCommunicator::iall_gather(const void* send, void* recv, size_t count, DType t) {
  const size_t bytes = count * dtype_size(t);
  Op o;
  o.what = "all-gather";
  o.result = recv;
  o.result_count = count * size_;
  o.type = t;
  if (!kHostAccessible) {
    std::vector<char> send_host;
    to_host(send_host, send, bytes);
    o.staging.resize(bytes * size_);
    MPI_Allgather(send_host.data(), int(count), mpi_datatype(t), o.staging.data(), int(count),
                  mpi_datatype(t), comm_);
    o.done = true;
    finish(o);
    return start(std::move(o));
  }
  o.post = [this, send, recv, count, t](Op& self) {
    MPI_Iallgather(send, int(count), mpi_datatype(t), recv, int(count), mpi_datatype(t), comm_, &self.req);
  };
  return start(std::move(o));
}

Request MpiCommunicator::isend(const void* buf, size_t count, DType t, int peer, int tag) {
  Op o;
  o.what = "send";
  o.peer = peer;
  if (!kHostAccessible) to_host(o.staging, buf, count * dtype_size(t));
  o.post = [this, buf, count, t, peer, tag](Op& self) {
    const void* p = kHostAccessible ? buf : static_cast<const void*>(self.staging.data());
    // Ordered: complete only once received, as NCCL's send does.
    (issue_order_ ? MPI_Issend : MPI_Isend)(p, int(count), mpi_datatype(t), peer, tag, comm_, &self.req);
  };
  return start(std::move(o));
}

void* MpiCommunicator::receive_into(Op& o, void* buf, size_t count, DType t, int peer) {
  o.peer = peer;
  o.result = buf;
  o.result_count = count;
  o.type = t;
  if (kHostAccessible) return buf;
  o.staging.resize(count * dtype_size(t));
  return o.staging.data();
}

Request MpiCommunicator::irecv(void* buf, size_t count, DType t, int peer, int tag) {
  Op o;
  o.what = "receive";
  receive_into(o, buf, count, t, peer);
  o.post = [this, count, t, peer, tag](Op& self) {
    void* p = kHostAccessible ? self.result : static_cast<void*>(self.staging.data());
    MPI_Irecv(p, int(count), mpi_datatype(t), peer, tag, comm_, &self.req);
  };
  return start(std::move(o));
}

Request MpiCommunicator::isendrecv(const void* send, size_t send_count, int dest, int send_tag, void* recv,
                                   size_t recv_count, int source, int recv_tag, DType t) {
  Op o;
  o.what = "send-receive";
  receive_into(o, recv, recv_count, t, source);
  if (!kHostAccessible) to_host(o.send_staging, send, send_count * dtype_size(t));
  // Two requests rather than MPI_Isendrecv, which needs MPI 4 (clusters still run MPI 3 libraries);
  // started together, as one NCCL group.
  o.post = [this, send, send_count, dest, send_tag, recv_count, source, recv_tag, t](Op& self) {
    void* r = kHostAccessible ? self.result : static_cast<void*>(self.staging.data());
    const void* s = kHostAccessible ? send : static_cast<const void*>(self.send_staging.data());
    MPI_Irecv(r, int(recv_count), mpi_datatype(t), source, recv_tag, comm_, &self.req);
    (issue_order_ ? MPI_Issend : MPI_Isend)(s, int(send_count), mpi_datatype(t), dest, send_tag, comm_, &self.send_req);
  };
  return start(std::move(o));
}

void MpiCommunicator::finish(Op& op) {
  void* host = kHostAccessible ? op.result : static_cast<void*>(op.staging.data());
  if (op.average) {
    const double f = 1.0 / size_;
    switch (op.type) {
      case DType::f32: scale<float>(host, op.result_count, f); break;
      case DType::f64: scale<double>(host, op.result_count, f); break;
      case DType::i32: scale<int32_t>(host, op.result_count, f); break;
      case DType::i64: scale<int64_t>(host, op.result_count, f); break;
      case DType::bf16: scale<bf16>(host, op.result_count, f); break;
    }
  }
  if (!kHostAccessible && op.result) to_device(op.result, op.staging, op.result_count * dtype_size(op.type));
  op.staging.clear();
  op.send_staging.clear();
}

bool MpiCommunicator::poll(Op& op) {
  if (op.done) return true;
  if (op.post) return false;  // ordered: not started yet
  int flag = 1;
  if (op.req != MPI_REQUEST_NULL) MPI_Test(&op.req, &flag, MPI_STATUS_IGNORE);
  if (flag && op.send_req != MPI_REQUEST_NULL) MPI_Test(&op.send_req, &flag, MPI_STATUS_IGNORE);
  if (!flag) return false;
  op.done = true;
  finish(op);
  return true;
}

void MpiCommunicator::release(Request& r) {
  free_.push_back(r.id);
  r.id = -1;
}

bool MpiCommunicator::test(Request& r) {
  if (!r.pending()) return true;
  if (issue_order_) {  // completes in order only, and is seen DEVICE_LAG device operations later
    advance();
    const Op& op = ops_[size_t(r.id)];
    if (!op.retired || device_clock() - op.retired_at < device_lag()) return false;
  } else if (!poll(ops_[size_t(r.id)])) {
    return false;
  }
  release(r);
  return true;
}

void MpiCommunicator::order_after(Request& r) {
  if (!r.pending()) return;
  if (!issue_order_) return complete(r);
  refuse_in_group("order_after");
  if (ops_[size_t(r.id)].retired) return release(r);  // its data is in place
  stream_waits().push_back({this, r.id});              // the stream waits before its next work
  r.id = -1;
}

std::string MpiCommunicator::describe(const Op& op) const {
  std::string out = std::string("the ") + op.what;
  if (op.peer >= 0)
    out += " with peer " + std::to_string(op.peer) + " (world rank " + std::to_string(world_rank_of(comm_, op.peer)) + ")";
  return out;
}

void MpiCommunicator::hang(double waited, const Op& op) const {
  std::string what = describe(op);
  const Queued* head = queue().empty() ? nullptr : &queue().front().front();
  if (head && &head->comm->ops_[size_t(head->id)] != &op)
    what += ", queued behind " + head->comm->describe(head->comm->ops_[size_t(head->id)]) +
            " at the head of this rank's communication queue";
  else
    what += ", at the head of this rank's communication queue";
  if (queue().size() > 1) {  // what the head holds up (the operation a peer may be waiting for)
    const Queued& next = queue()[1].front();
    what += "; queued behind the head: " + next.comm->describe(next.comm->ops_[size_t(next.id)]);
    if (queue().size() > 2) what += " and " + std::to_string(queue().size() - 2) + " more";
  }
  abort_on_hang(waited, what + " (mpi-ordered: a device's operations run one at a time in issue order; "
                               "a send and a receive that must progress together belong in one group)");
}

void MpiCommunicator::complete(Request& r) {
  if (!r.pending()) return;
  if (issue_order_) {  // the host waits: it sees the operation done as soon as it is
    refuse_in_group("a host wait");
    await_retired(r.id);
    return release(r);
  }
  Op& op = ops_[r.id];
  if (!op.done) {
    mpi_wait(op.req, op.what, op.peer);
    if (op.send_req != MPI_REQUEST_NULL) mpi_wait(op.send_req, op.what, op.peer);
    op.done = true;
    finish(op);
  }
  test(r);  // frees the slot
}

void MpiCommunicator::progress() {
  if (issue_order_) {  // the host gives the device time
    ++device_clock();
    return advance();
  }
  for (Op& op : ops_)
    if ((op.req != MPI_REQUEST_NULL || op.send_req != MPI_REQUEST_NULL) && !op.done) poll(op);
}

void MpiCommunicator::barrier() {
  Op o;
  o.what = "barrier";
  o.post = [this](Op& self) { MPI_Ibarrier(comm_, &self.req); };
  Request r = start(std::move(o));
  wait(r);
}

namespace {
[[maybe_unused]] const bool registered = CommRegistry::add(
    {"mpi", "MPI with host buffers (device buffers staged through the host)", 1,
     [](MPI_Comm c) -> std::unique_ptr<Communicator> { return std::make_unique<MpiCommunicator>(c); },
     [](const CommContext&) { return std::string("mpi"); },
     // MPI advances a non-blocking all-reduce only inside MPI calls (made between blocks): small
     // buckets finish during backward.
     1.0, {}});
[[maybe_unused]] const bool registered_ordered = CommRegistry::add(
    {"mpi-ordered",
     "MPI with NCCL's ordering (each group's operations in issue order, sends complete when received, only "
     "grouped send/receive pairs start together): finds on a CPU the hangs a GPU run would have",
     3, [](MPI_Comm c) -> std::unique_ptr<Communicator> { return std::make_unique<MpiCommunicator>(c, true); },
     [](const CommContext&) { return std::string("mpi-ordered"); }, 1.0, {}});
}  // namespace

}  // namespace gpt2
