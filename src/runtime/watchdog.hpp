#pragma once
// The watchdog over every wait (runtime/communicator.cpp): MPI requests completed by polling, with
// the job aborted and the waited-for operation named after Communicator::timeout_seconds(), and the
// scopes that say what a rank was doing. The communicator backends (modules/comm) and the control
// plane wait through it.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

namespace gpt2 {

// Host-side helpers over an MPI communicator, for small control values (loss, norms, flags).
// Like every wait here, they abort the job after the timeout instead of hanging on a dead peer.
double allreduce_sum(MPI_Comm comm, double x);
int64_t allreduce_max(MPI_Comm comm, int64_t x);
// Completes an MPI request, polling; after Communicator::timeout_seconds() prints which operation
// (and peer) it waited for and calls MPI_Abort.
void mpi_wait(MPI_Request& r, const char* what, int peer = -1);
// Called while any wait spins: moves operations that run on their own on a device (the
// mpi-ordered backend sets it, so queued operations of every communicator start while a rank waits
// on one -- as NCCL's streams go on while the host blocks).
void set_background_progress(void (*progress)());
void background_progress();

// What this rank is doing while it may wait, for the watchdog's message: a scope that names it
// (the pipeline's pass and peer, say). Scopes nest; the text is made only when a wait times out.
class WaitContext {
 public:
  explicit WaitContext(std::function<std::string()> describe);
  ~WaitContext();
  WaitContext(const WaitContext&) = delete;
  WaitContext& operator=(const WaitContext&) = delete;
  static std::string describe();  // the open scopes, outermost first ("" when none)
};
// The watchdog's end: prints "error: rank R waited S s for WHAT (CONTEXT)" and what to do next, gives
// the other stuck ranks a grace period to say what they wait for, then aborts the job with exit 3.
[[noreturn]] void abort_on_hang(double waited, const std::string& what);
// The world rank of rank `rank` of communicator comm (for messages).
int world_rank_of(MPI_Comm comm, int rank);

}  // namespace gpt2
