#pragma once
// Errors that every rank agrees on. Setup runs in phases; within a phase each rank does local work
// (no collectives), then all ranks compare notes: if any failed, every rank throws the same
// CollectiveError carrying the message of the lowest failing rank. The app prints it once (rank 0)
// and every rank exits non-zero: no rank is left waiting in a collective that will never complete.
#include <mpi.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2 {

class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(const std::string& msg, bool input) : std::runtime_error(msg), input_(input) {}
  bool input_error() const { return input_; }  // bad input (exit 2) rather than a failure (exit 1)

 private:
  bool input_;
};

// Runs f on every rank of comm, then agrees; throws CollectiveError everywhere if any rank threw.
void collective_phase(MPI_Comm comm, const std::function<void()>& f);

// MPI_Alltoallv of one vector per rank of comm (to[r] goes to rank r): what every rank sent this one,
// in rank order. Collective; a count over 2^31 values (MPI's int) fails on every rank
// (CollectiveError) before any data moves.
struct AllToAllPlan {
  std::vector<int> send, send_at, recv, recv_at;
  size_t received = 0;
};
AllToAllPlan all_to_all_plan(MPI_Comm comm, const std::vector<size_t>& sizes);

template <class T>
std::vector<T> all_to_all(MPI_Comm comm, const std::vector<std::vector<T>>& to, MPI_Datatype type) {
  std::vector<size_t> sizes;
  for (const auto& v : to) sizes.push_back(v.size());
  const AllToAllPlan p = all_to_all_plan(comm, sizes);
  std::vector<T> flat, got(p.received);
  for (const auto& v : to) flat.insert(flat.end(), v.begin(), v.end());
  MPI_Alltoallv(flat.data(), p.send.data(), p.send_at.data(), type, got.data(), p.recv.data(), p.recv_at.data(), type,
                comm);
  return got;
}

}  // namespace gpt2
