#include "runtime/serial_communicator.hpp"

#include "core/error.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

namespace {
void copy(const void* src, void* dst, size_t bytes) {
  if (src == dst || bytes == 0) return;
  using Bytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryUnmanaged>;
  // On the execution space: ordered with the kernels around it, no whole-device wait.
  Kokkos::deep_copy(ExecSpace(), Bytes(static_cast<char*>(dst), bytes), Bytes(static_cast<char*>(const_cast<void*>(src)), bytes));
}
}  // namespace

Request SerialCommunicator::ireduce_scatter(const void* send, void* recv, size_t count, DType t, ReduceOp) {
  copy(send, recv, count * dtype_size(t));
  return {};
}

Request SerialCommunicator::iall_gather(const void* send, void* recv, size_t count, DType t) {
  copy(send, recv, count * dtype_size(t));
  return {};
}

Request SerialCommunicator::isend(const void*, size_t, DType, int peer, int) {
  fail("serial communicator: a group of one rank has no peer ", peer, " to send to");
}

Request SerialCommunicator::irecv(void*, size_t, DType, int peer, int) {
  fail("serial communicator: a group of one rank has no peer ", peer, " to receive from");
}

Request SerialCommunicator::isendrecv(const void* send, size_t send_count, int dest, int, void* recv,
                                      size_t recv_count, int source, int, DType t) {
  if (dest != 0 || source != 0 || send_count != recv_count)
    fail("serial communicator: a send-receive must be with itself and of equal size");
  copy(send, recv, send_count * dtype_size(t));
  return {};
}

}  // namespace gpt2
