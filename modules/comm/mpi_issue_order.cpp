// mpi-ordered: NCCL's ordering modelled on the host (MpiCommunicator with issue_order). One queue of
// operation groups per process, shared by every communicator of the rank as a device's queue is:
// the oldest group's operations start together and the next group only once all of them completed;
// group_start/group_end collect what is issued between them into one group; a whole-device wait
// drains the queue (with the watchdog). The host runs ahead of this device: what order_after names
// is waited for only when the next device work is issued (catch_up, the device-work hook), and a
// completion becomes visible to test() only after the device's clock -- device work issued and host
// polls -- moved DEVICE_LAG on. The MPI calls themselves are in mpi_communicator.cpp.
#include "modules/comm/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/error.hpp"
#include "runtime/watchdog.hpp"

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

std::vector<MpiCommunicator::Queued>& MpiCommunicator::stream_waits() {
  static std::vector<Queued> w;
  return w;
}
uint64_t& MpiCommunicator::device_clock() {
  static uint64_t t = 0;
  return t;
}
uint64_t MpiCommunicator::device_lag() {
  static const uint64_t lag = [] {
    const char* e = std::getenv("GPT2_DEVICE_LAG");
    return e && *e ? uint64_t(std::strtoull(e, nullptr, 10)) : uint64_t(1024);
  }();
  return lag;
}

namespace {
// A waiting rank first spins, then yields (its peer may need this core: ranks share the host's
// cores), and sleeps only once the wait is long.
void back_off(int spins) {
  if (spins > 4096)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  else if (spins > 200)
    std::this_thread::yield();
}
}  // namespace

void MpiCommunicator::refuse_in_group(const char* what) const {
  if (depth() > 0)
    fail("mpi-ordered: ", what, " inside an open communication group: NCCL launches a group at its end, so "
         "nothing issued in it can be waited for (or ordered after) before group_end");
}

void MpiCommunicator::await_retired(int id) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0; !ops_[size_t(id)].retired; ++spins) {
    advance();
    if (ops_[size_t(id)].retired) return;
    back_off(spins);
    if ((spins & 1023) != 0) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_seconds()) hang(waited, ops_[size_t(id)]);
  }
}

namespace {
bool g_busy = false;  // inside advance() or catch_up(): a staging copy's hook must not re-enter them
}

// The compute stream reaches its next work: first everything it was ordered after (in issue order,
// which is also the order they complete in).

void MpiCommunicator::catch_up() {
  ++device_clock();
  if (stream_waits().empty() || g_busy) return;
  g_busy = true;
  std::vector<Queued> waits;
  waits.swap(stream_waits());
  for (const Queued& w : waits) {
    w.comm->await_retired(w.id);
    Request r{w.id};
    w.comm->release(r);
  }
  g_busy = false;
}

void MpiCommunicator::advance() {
  const bool outer = !g_busy;
  g_busy = true;
  advance_queue();
  if (outer) g_busy = false;
}

void MpiCommunicator::advance_queue() {
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
    for (const Queued& e : q.front()) {
      Op& op = e.comm->ops_[size_t(e.id)];
      op.retired = true;
      op.retired_at = device_clock();
    }
    q.pop_front();
  }
}

void MpiCommunicator::drain() {
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    advance();
    if (queue().empty()) break;
    back_off(spins);
    if ((spins & 1023) != 0) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_seconds()) {
      const Queued& head = queue().front().front();
      abort_on_hang(waited, "a whole-device wait: the communication queue's head, " +
                                head.comm->describe(head.comm->ops_[size_t(head.id)]) + ", never completed");
    }
  }
  catch_up();  // (everything retired: the stream's waits end at once)
  // The host has seen the whole device finish: every completion is visible from now on.
  device_clock() += device_lag();
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
