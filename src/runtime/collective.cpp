#include "runtime/collective.hpp"

#include "core/error.hpp"

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
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  int len = int(msg.size());
  int flag[2] = {len, input};
  MPI_Bcast(flag, 2, MPI_INT, first, comm);
  msg.resize(size_t(flag[0]));
  MPI_Bcast(&msg[0], flag[0], MPI_CHAR, first, comm);
  throw CollectiveError(msg, flag[1] != 0);
}

}  // namespace gpt2
