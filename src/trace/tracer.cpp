#include "trace/tracer.hpp"

#include <Kokkos_Core.hpp>

namespace gpt2 {

const char* event_name(EventKind k) {
  static const char* names[] = {"forward",  "backward", "optimizer",  "allreduce_issue",
                                "allreduce_wait", "send", "recv",     "data",
                                "eval",     "checkpoint", "step",     "tied_sync",
                                "send_wait", "scalar_sync"};
  return names[int(k)];
}

void Tracer::configure(bool enabled, int64_t capacity, bool sync, int stage) {
  enabled_ = enabled;
  capacity_ = capacity;
  sync_ = sync;
  stage_ = stage;
  events_.clear();
  dropped_ = 0;
  if (enabled) events_.reserve(size_t(capacity));
}

void Tracer::fence() const {
  if (sync_) Kokkos::fence();
}

double Tracer::sync_clock(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  offset_ = 0;
  double error = 0;
  const int rounds = 8;
  for (int peer = 1; peer < size; ++peer) {
    MPI_Barrier(comm);
    if (rank == 0) {
      for (int i = 0; i < rounds; ++i) {
        double dummy;
        MPI_Recv(&dummy, 1, MPI_DOUBLE, peer, 71, comm, MPI_STATUS_IGNORE);
        const double t = now();
        MPI_Send(&t, 1, MPI_DOUBLE, peer, 72, comm);
      }
    } else if (rank == peer) {
      double best_rtt = 1e30, best_offset = 0;
      for (int i = 0; i < rounds; ++i) {
        const double t0 = now();
        MPI_Send(&t0, 1, MPI_DOUBLE, 0, 71, comm);
        double t_root;
        MPI_Recv(&t_root, 1, MPI_DOUBLE, 0, 72, comm, MPI_STATUS_IGNORE);
        const double t1 = now();
        if (t1 - t0 < best_rtt) best_rtt = t1 - t0, best_offset = (t0 + t1) / 2 - t_root;
      }
      offset_ = best_offset;
      error = best_rtt / 2;
    }
  }
  // Zero of the common clock: now, on rank 0 (so trace times start near 0).
  double zero = rank == 0 ? now() : 0;
  MPI_Bcast(&zero, 1, MPI_DOUBLE, 0, comm);
  offset_ += zero;
  clock_error_ = error;
  return error;
}

}  // namespace gpt2
