#pragma once
// Device work about to be issued: a kernel, a copy, a GEMM. On a GPU the stream runs it after every
// operation it was ordered after (Communicator::order_after) without the host waiting; a host model
// of the device (mpi-ordered) sets the hook that lets its "stream" catch up at this point -- the
// first moment the host's next work could read what a communication writes. tensor/device_counters
// calls it for every Kokkos kernel and copy; the GEMM dispatch for each library call.
namespace gpt2 {

using DeviceWorkHook = void (*)();
void set_device_work_hook(DeviceWorkHook hook);  // nullptr: none (the default)
void device_work();                              // before device work is issued; a no-op without a hook

}  // namespace gpt2
