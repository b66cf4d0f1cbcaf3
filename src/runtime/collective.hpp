#pragma once
// Errors that every rank agrees on. Setup runs in phases; within a phase each rank does local work
// (no collectives), then all ranks compare notes: if any failed, every rank throws the same
// CollectiveError carrying the message of the lowest failing rank. The app prints it once (rank 0)
// and every rank exits non-zero: no rank is left waiting in a collective that will never complete.
#include <mpi.h>

#include <functional>
#include <stdexcept>
#include <string>

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

}  // namespace gpt2
