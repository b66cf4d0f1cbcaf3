#include "runtime/collective.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

void collective_phase(MPI_Comm comm, const std::function<void()>& f) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string msg;
  int input = 0;
  try {
    f();
  } catch (const CollectiveError& e) {
    msg = e.what(), input = e.input_error();
  } catch (const InputError& e) {
    msg = e.what(), input = 1;
  } catch (const std::exception& e) {
    msg = e.what();
    if (msg.empty()) msg = "unknown error";
  }
  const int mine = msg.empty() ? size : rank;
  int first = size;
  // (A phase often leaves the others waiting on one rank's work -- rank 0 writing a file: the wait
  // polls and sleeps instead of MPI's spin, which would take the cores that rank needs.)
  MPI_Request r;
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &r);
  mpi_wait(r, "the end of a set-up phase (every rank's errors compared)");
  if (first == size) return;
  int len = int(msg.size());
  int flag[2] = {len, input};
  MPI_Bcast(flag, 2, MPI_INT, first, comm);
  msg.resize(size_t(flag[0]));
  MPI_Bcast(&msg[0], flag[0], MPI_CHAR, first, comm);
  throw CollectiveError(msg, flag[1] != 0);
}

AllToAllPlan all_to_all_plan(MPI_Comm comm, const std::vector<size_t>& sizes) {
  AllToAllPlan p;
  const size_t n = sizes.size();
  p.send.resize(n), p.send_at.resize(n), p.recv.resize(n), p.recv_at.resize(n);
  size_t sent = 0;
  for (size_t r = 0; r < n; ++r) p.send_at[r] = int(std::min<size_t>(sent, INT32_MAX)), sent += sizes[r];
  collective_phase(comm, [&] {
    if (sent > size_t(INT32_MAX)) fail("all-to-all: over 2^31 values from a rank (MPI counts are int)");
  });
  for (size_t r = 0; r < n; ++r) p.send[r] = int(sizes[r]);
  MPI_Alltoall(p.send.data(), 1, MPI_INT, p.recv.data(), 1, MPI_INT, comm);
  for (size_t r = 0; r < n; ++r) p.recv_at[r] = int(std::min<size_t>(p.received, INT32_MAX)), p.received += size_t(p.recv[r]);
  collective_phase(comm, [&] {
    if (p.received > size_t(INT32_MAX)) fail("all-to-all: over 2^31 values to a rank (MPI counts are int)");
  });
  return p;
}

}  // namespace gpt2
