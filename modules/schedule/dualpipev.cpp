// dualpipev (DeepSeek-V3's DualPipe cut to a V; Qi et al.'s V placement): two chunks per rank --
// rank r runs virtual stage r on the way down and 2p - 1 - r on the way back, so the first and last
// stages share rank 0 -- and in the steady state a forward of one chunk paired with a backward of
// the other (on a GPU the pair's computation overlaps the other's communication). From DeepSeek's
// description of its eight phases, per rank r of p with m >= 2p microbatches (F0/F1: a forward of
// chunk 0/1, B: a backward, zb: split into B now and W later, W: the oldest pending weight pass):
//   1. 2(p - r - 1) x F0          2. (r + 1) x (F0, F1)          3. (p - r - 1) x (B1 zb, W, F1)
//   4. (m - 2p + r + 1) x (F0+B1, F1+B0)  -- the paired steady state
//   5. (p - r - 1) x (B1, F1+B0)  6. (r + 1) x (B1, B0), the second half zb
//   7. (p - r - 1) x (W, B0 zb)   8. (r + 1) x W
// Each chunk takes its microbatches in order. Paired passes carry Action::pair (the trace and the
// Gantt plot show them). A rank holds at most 2p + 1 microbatch-chunks.
#include <deque>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
class DualPipeV {
 public:
  DualPipeV(int p, int m, int r) : p_(p), m_(m), r_(r) {}

  std::vector<Action> order() {
    const int p = p_, r = r_;
    repeat(2 * (p - r - 1), [&] { forward(0); });
    repeat(r + 1, [&] { forward(0), forward(1); });
    repeat(p - r - 1, [&] { backward(1, true), weight(), forward(1); });
    repeat(m_ - 2 * p + r + 1, [&] { paired(0, 1), paired(1, 0); });
    repeat(p - r - 1, [&] { backward(1, false), paired(1, 0); });
    const int half = (r + 1) / 2;  // phase 6: split backwards from its middle on (odd ranks one sooner)
    for (int i = 0; i <= r; ++i) {
      backward(1, i > half || (i == half && r % 2 == 1));
      backward(0, i >= half);
    }
    repeat(p - r - 1, [&] { weight(), backward(0, true); });
    repeat(r + 1, [&] { weight(); });
    if (!pending_.empty()) fail("dualpipev: ", pending_.size(), " weight passes left over on rank ", r);
    return out_;
  }

 private:
  template <class F>
  static void repeat(int n, F f) {
    for (int i = 0; i < n; ++i) f();
  }
  void forward(int c) { out_.push_back({ActionKind::forward, next_f_[c]++, -1, c}); }
  void backward(int c, bool split) {
    const int mb = next_b_[c]++;
    if (!split) {
      out_.push_back({ActionKind::backward, mb, -1, c});
      return;
    }
    out_.push_back({ActionKind::backward_input, mb, -1, c});
    pending_.push_back({mb, c});
  }
  void weight() {
    out_.push_back({ActionKind::backward_weight, pending_.front().first, -1, pending_.front().second});
    pending_.pop_front();
  }
  void paired(int fc, int bc) {  // F of chunk fc and B of chunk bc, one pair
    forward(fc);
    backward(bc, false);
    out_[out_.size() - 2].pair = out_.back().pair = ++pairs_;
  }

  int p_, m_, r_;
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0}, pairs_ = 0;
  std::deque<std::pair<int, int>> pending_;  // (mb, chunk) of split backwards, oldest first
  std::vector<Action> out_;
};

std::vector<Action> dualpipev(const ScheduleShape& s) {
  if (s.microbatches < 2 * s.stages)
    fail_input("parallel.microbatches", "dualpipev needs at least 2 x parallel.pp = ", 2 * s.stages,
               " microbatches, got ", s.microbatches);
  Placement pl;
  pl.kind = Placement::Kind::vee, pl.ranks = s.stages, pl.chunks = 2;
  std::vector<std::vector<Action>> ranks;  // every rank's, so that receives follow the sending order
  for (int r = 0; r < s.stages; ++r) ranks.push_back(DualPipeV(s.stages, s.microbatches, r).order());
  return with_communication(ranks, pl)[size_t(s.stage)];
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"dualpipev",
                  "DualPipeV (DeepSeek): two chunks per rank in a V, a forward and a backward paired in the steady "
                  "state, part of the backwards split; m >= 2p",
                  7, dualpipev, Placement::Kind::vee, /*chunks=*/2, /*split_backward=*/true};
  e.max_in_flight = [](const ScheduleShape& s) { return std::min(2 * s.stages + 1, 2 * s.microbatches); };
  e.min_microbatches_per_stage = 2;
  return e;
}());
}  // namespace

}  // namespace gpt2
