#pragma once
// The one place that waits for the whole device: every execution-space instance and every stream
// (communicators' included). Inside a step, work is ordered by the execution space instead -- a
// space's deep_copy, kernels in issue order, stream-ordered communication (Communicator::
// order_after) -- and the host waits once, to read the step's loss and gradient norm. Every fence,
// this one and any Kokkos inserts, is counted by tensor/device_counters.
namespace gpt2 {

void device_sync(const char* why);  // the communication queue drained, then Kokkos::fence()

// A backend whose communication runs on its own queue (mpi-ordered: the device's model on the
// host) sets what completes everything queued, as a device's whole wait includes its streams.
void set_device_drain(void (*drain)());

}  // namespace gpt2
