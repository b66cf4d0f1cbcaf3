// mpi-ordered: NCCL's ordering modelled on the host (MpiCommunicator with issue_order). One queue of
// operation groups per process, shared by every communicator of the rank as a device's queue is:
// the oldest group's operations start together and the next group only once all of them completed;
// group_start/group_end collect what is issued between them into one group; a whole-device wait
// drains the queue (with the watchdog). The MPI calls themselves are in mpi_communicator.cpp.
#include "modules/comm/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.hpp"

namespace gpt2 {

std::deque<MpiCommunicator::Group>& MpiCommunicator::queue() {
  static std::deque<Group> q;
  return q;
}
MpiCommunicator::Group& MpiCommunicator::issuing() {
  static Group g;
  return g;
}
int& MpiCommunicator::depth() {
  static int d = 0;
  return d;
}

void MpiCommunicator::advance() {
  auto& q = queue();
  while (!q.empty()) {
    bool done = true;
    for (const Queued& e : q.front()) {  // the oldest group: all its operations start together
      Op& op = e.comm->ops_[size_t(e.id)];
      if (op.post) {
        std::function<void(Op&)> post = std::move(op.post);
        op.post = nullptr;
        post(op);
      }
      done = e.comm->poll(op) && done;
    }
    if (!done) return;
    for (const Queued& e : q.front()) e.comm->ops_[size_t(e.id)].retired = true;
    q.pop_front();
  }
}

void MpiCommunicator::drain() {
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; !queue().empty(); ++spins) {
    advance();
    if (queue().empty()) return;
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(20));
    if ((spins & 1023) != 0) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_seconds()) {
      const Queued& head = queue().front().front();
      abort_on_hang(waited, "a whole-device wait: the communication queue's head, " +
                                head.comm->describe(head.comm->ops_[size_t(head.id)]) + ", never completed");
    }
  }
}

void MpiCommunicator::group_start() {
  if (issue_order_) ++depth();
}

void MpiCommunicator::group_end() {
  if (!issue_order_) return;
  if (depth() == 0) fail("MPI communicator: group_end without group_start");
  if (--depth() > 0 || issuing().empty()) return;
  queue().push_back(std::move(issuing()));
  issuing().clear();
  advance();
}

}  // namespace gpt2
