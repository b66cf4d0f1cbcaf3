#include "trace/tracer.hpp"

#include "runtime/device_sync.hpp"

#include <Kokkos_Core.hpp>

#include "plugins/communicator.hpp"

namespace gpt2 {

namespace {
struct KindInfo {
  const char* name;
  EventClass cls;
  const char* display;  // how timelines draw it (event_display)
  const char* colour;
};
constexpr EventClass C = EventClass::compute, M = EventClass::communication, O = EventClass::other;
// In EventKind's order.
constexpr KindInfo kKinds[] = {
    {"forward", C, "row", "#4C72B0"},
    {"backward", C, "row", "#DD8452"},
    {"optimizer", O, "row", "#DA8BC3"},
    {"allreduce_issue", M, "lane", "#8172B3"},
    {"allreduce_wait", M, "row", "#937860"},
    {"send", M, "row", "#55A868"},
    {"recv", M, "row", "#C44E52"},
    {"data", O, "row", "#8C8C8C"},
    {"eval", O, "detail", "#64B5CD"},
    {"checkpoint", O, "row", "#222222"},
    {"step", O, "step", "#EEEEEE"},
    {"tied_sync", M, "row", "#CCB974"},
    {"send_wait", M, "detail", "#8DA0CB"},
    {"scalar_sync", M, "detail", "#A6D854"},
    {"reduce_scatter_issue", M, "lane", "#8172B3"},
    {"reduce_scatter_wait", M, "row", "#937860"},
    {"all_gather_issue", M, "lane", "#B07AA1"},
    {"all_gather_wait", M, "row", "#9C755F"},
    {"tp_collective", M, "lane", "#76B7B2"},
    {"unit_forward", O, "unit", "#A1B9DC"},
    {"unit_backward", O, "unit", "#EDC1A5"},
    {"backward_weight", C, "row", "#E5AE38"},
    {"unit_backward_weight", O, "unit", "#F2D69B"},
    {"checkpoint_stage", O, "row", "#444444"},
    {"checkpoint_write", O, "lane", "#999999"},
    {"recompute", O, "lane", "#8E6C8A"},
    {"cp_shift", M, "lane", "#F28E2B"},
    {"straggler", O, "detail", "#D62728"},
};
static_assert(sizeof(kKinds) / sizeof(kKinds[0]) == size_t(EventKind::count_), "one entry per EventKind");
}  // namespace

const char* event_name(EventKind k) { return kKinds[int(k)].name; }
EventClass event_class(EventKind k) { return kKinds[int(k)].cls; }
const char* event_display(EventKind k) { return kKinds[int(k)].display; }
const char* event_colour(EventKind k) { return kKinds[int(k)].colour; }
// A cp shift's event spans its overlap with compute: its blocking part comes through note_wait.
void Tracer::account(EventKind k, double seconds) {
  if (is_pass(k))
    times_.compute += seconds;
  else if (event_class(k) == EventClass::communication && k != EventKind::cp_shift)
    note_wait(seconds);
}

void Tracer::note_wait(double seconds) {
  times_.wait += seconds;
  if (in_pass_) times_.compute -= seconds;
}

bool is_dp_collective(EventKind k) {
  return k == EventKind::allreduce_issue || k == EventKind::reduce_scatter_issue || k == EventKind::all_gather_issue;
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
  if (sync_) device_sync("trace.sync: an event's bounds");
}

double Tracer::sync_clock(Communicator& comm) {
  const int rank = comm.rank(), size = comm.size();
  offset_ = 0;
  double error = 0;
  const int rounds = 8;
  for (int peer = 1; peer < size; ++peer) {
    comm.host_sum(0);  // a barrier: the pair measures undisturbed
    if (rank == 0) {
      for (int i = 0; i < rounds; ++i) {
        double dummy;
        comm.host_recv(&dummy, sizeof dummy, peer, 71);
        const double t = now();
        comm.host_send(&t, sizeof t, peer, 72);
      }
    } else if (rank == peer) {
      double best_rtt = 1e30, best_offset = 0;
      for (int i = 0; i < rounds; ++i) {
        const double t0 = now();
        comm.host_send(&t0, sizeof t0, 0, 71);
        double t_root;
        comm.host_recv(&t_root, sizeof t_root, 0, 72);
        const double t1 = now();
        if (t1 - t0 < best_rtt) best_rtt = t1 - t0, best_offset = (t0 + t1) / 2 - t_root;
      }
      offset_ = best_offset;
      error = best_rtt / 2;
    }
  }
  // Zero of the common clock: now, on rank 0 (so trace times start near 0).
  double zero = rank == 0 ? now() : 0;
  comm.host_broadcast(&zero, sizeof zero, 0);
  offset_ += zero;
  clock_error_ = error;
  return error;
}

}  // namespace gpt2
