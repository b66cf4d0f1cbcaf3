#pragma once
// Timed events of one rank, kept in preallocated memory (recording is a few stores) on a clock that
// all ranks share: sync_clock() measures each rank's offset to rank 0 at start-up (ping-pong, best of
// several rounds). With sync on, device work is fenced at both ends of each event so the times cover
// the kernels; off, events time what the host issued (cheap, and what a run without tracing does).
// Communication events carry the bytes they move. With pass timing on (train.straggler_every), every
// timed region also adds to this rank's compute and wait seconds, traced or not (take_pass_times). Each kind has a name, a class (pipeline compute,
// communication, other), a display class and a colour, which the trace file stores so that readers
// need no copy of them.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

enum class EventKind : int32_t {
  forward, backward, optimizer, allreduce_issue, allreduce_wait, send, recv, data, eval,
  checkpoint, step, tied_sync,
  send_wait,    // completing non-blocking pipeline sends
  scalar_sync,  // the per-step loss and gradient-norm reductions
  reduce_scatter_issue, reduce_scatter_wait,  // sharded gradients (ZeRO)
  all_gather_issue, all_gather_wait,          // sharded parameters (ZeRO)
  tp_collective,                              // tensor parallelism's all-reduces, gathers, scatters
  unit_forward, unit_backward,                // trace.units: a model unit inside a forward/backward
  backward_weight,                            // the weight pass W of a split backward (B is `backward`)
  unit_backward_weight,                       // trace.units: a unit inside a weight pass
  checkpoint_stage,  // checkpoint.async: the copy of the state a background thread then writes
  checkpoint_write,  // checkpoint.async: that write, on its thread (with the bytes it wrote)
  recompute,         // train.recompute: a block's recomputation inside its backward (unit: 1 + block)
  cp_shift,          // context parallelism: a K/V block (or its gradient) moved one rank on the ring
  straggler,         // train.straggler_every: this rank was named slow over the steps the event spans
  count_
};
enum class EventClass { compute, communication, other };
const char* event_name(EventKind k);
EventClass event_class(EventKind k);
// How a timeline draws it: "row" (the rank's row), "lane" (a thin lane under the row: work issued
// inside a compute), "step" (a whole step), "unit" (trace.units: a model unit inside a pass),
// "detail" (not drawn on the Gantt chart); and its colour (#RRGGBB), the same in every plot.
const char* event_display(EventKind k);
const char* event_colour(EventKind k);
// A data-parallel collective over gradients or parameters (its bytes: the data volume as the ZeRO
// paper counts it).
bool is_dp_collective(EventKind k);

struct Event {
  int32_t kind, step, microbatch, stage;
  double start, end;  // seconds on the common clock
  int64_t bytes;      // moved by a communication event (0 otherwise)
  int32_t chunk;      // the pipeline chunk (virtual stage) of a compute event, 0 without chunks
  int32_t unit;       // unit events: 0 embedding, 1 + l block l, n_layer + 1 head and loss; else -1
  int32_t pair;       // compute events a schedule pairs (Action::pair): the same number > 0; else 0
};

class Communicator;

class Tracer {
 public:
  Tracer() = default;
  void configure(bool enabled, int64_t capacity, bool sync, int stage);
  bool enabled() const { return enabled_; }
  bool sync() const { return sync_; }

  // Compute: the passes (forward, backward, weight), less the blocking communication inside them;
  // wait: the communication outside the passes and the blocking part inside them. On a GPU these
  // are the host's times (what it issued, and waited for).
  struct PassTimes {
    double compute = 0, wait = 0;
  };
  void time_passes(bool on) { timing_ = on; }
  bool timing() const { return timing_ || enabled_; }
  PassTimes take_pass_times() {  // since the last take
    const PassTimes t = times_;
    times_ = PassTimes();
    return t;
  }
  // Time a communication spent blocking the host where no event says so (a cp shift's completion).
  void note_wait(double seconds);

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
           offset_;
  }
  // Collective over `comm`: afterwards now() reads the same on every rank (within the ping-pong
  // error). Returns this rank's estimated error bound in seconds.
  double sync_clock(Communicator& comm);

  void record(EventKind k, int step, int mb, double start, double end, int64_t bytes = 0, int chunk = 0,
              int unit = -1, int pair = 0) {
    if (timing()) account(k, end - start);
    if (!enabled_) return;
    if (events_.size() < size_t(capacity_))
      events_.push_back({int32_t(k), step, mb, stage_, start, end, bytes, chunk, unit, pair});
    else ++dropped_;
  }
  void fence() const;  // device fence when sync is on

  // Times a region: Scope s(tracer, EventKind::forward, step, mb);
  class Scope {
   public:
    Scope(Tracer& t, EventKind k, int step, int mb = -1, size_t bytes = 0, int chunk = 0, int pair = 0)
        : t_(t), k_(k), step_(step), mb_(mb), chunk_(chunk), pair_(pair), bytes_(int64_t(bytes)) {
      if (t_.enabled_) t_.fence();
      if (t_.timing()) start_ = t_.now();
      if (is_pass(k_)) t_.in_pass_ = true;
    }
    ~Scope() {
      if (is_pass(k_)) t_.in_pass_ = false;
      if (!t_.timing()) return;
      if (t_.enabled_) t_.fence();
      t_.record(k_, step_, mb_, start_, t_.now(), bytes_, chunk_, -1, pair_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Tracer& t_;
    EventKind k_;
    int step_, mb_, chunk_, pair_;
    int64_t bytes_;
    double start_ = 0;
  };

  const std::vector<Event>& events() const { return events_; }
  double clock_error() const { return clock_error_; }  // from the last sync_clock
  int64_t dropped() const { return dropped_; }

 private:
  static bool is_pass(EventKind k) {
    return k == EventKind::forward || k == EventKind::backward || k == EventKind::backward_weight;
  }
  void account(EventKind k, double seconds);

  bool enabled_ = false, sync_ = false, timing_ = false, in_pass_ = false;
  PassTimes times_;
  int64_t capacity_ = 0, dropped_ = 0;
  int32_t stage_ = 0;
  double offset_ = 0, clock_error_ = 0;
  std::vector<Event> events_;
};

}  // namespace gpt2
