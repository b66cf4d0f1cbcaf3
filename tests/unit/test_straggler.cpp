// Slow ranks (train/straggler.hpp): who is named among peers, and the pass times a rank reports.
#include <gtest/gtest.h>

#include <vector>

#include "trace/tracer.hpp"
#include "train/straggler.hpp"

using namespace gpt2;

namespace {
std::vector<int> named(const std::vector<double>& compute, const std::vector<int>& group, double ratio = 1.2) {
  std::vector<int> out;
  for (const SlowRank& s : find_slow_ranks(compute, group, ratio)) out.push_back(s.rank);
  return out;
}
}  // namespace

TEST(Stragglers, ARankIsComparedWithTheMedianOfItsPeersNotWithItself) {
  // Two peers, one 1.5x: against itself in the median (1.25) it would be 1.2x, not named.
  EXPECT_EQ(named({1.0, 1.5}, {0, 0}), std::vector<int>({1}));
  const std::vector<SlowRank> s = find_slow_ranks({1.0, 1.5}, {0, 0}, 1.2);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_DOUBLE_EQ(s[0].compute_s, 1.5);
  EXPECT_DOUBLE_EQ(s[0].peers_s, 1.0);
  // The median, not the mean: one slow peer does not hide another rank's slowness, nor flag a normal one.
  EXPECT_EQ(named({1.0, 1.0, 1.0, 1.3}, {0, 0, 0, 0}), std::vector<int>({3}));
  EXPECT_EQ(named({1.0, 1.3, 1.0, 5.0}, {0, 0, 0, 0}), std::vector<int>({1, 3}));  // (the mean: 3 only)
  EXPECT_TRUE(named({1.0, 1.19}, {0, 0}).empty());
}

TEST(Stragglers, ASlownessOfLessThanTheGapIsNotNamed) {
  EXPECT_TRUE(find_slow_ranks({0.0014, 0.0021}, {0, 0}, 1.2, 1e-3).empty());  // 1.5x, but 0.7 ms a step
  EXPECT_EQ(find_slow_ranks({0.0040, 0.0060}, {0, 0}, 1.2, 1e-3).size(), 1u);
}

TEST(Stragglers, PeersAreTheRanksOfOneStageAndAnEmptyIntervalIsNoEvidence) {
  // Stage 1 does twice stage 0's work: nobody is slow among the ranks of their own stage.
  EXPECT_TRUE(named({1.0, 2.0, 1.0, 2.0}, {0, 1, 0, 1}).empty());
  EXPECT_EQ(named({1.0, 2.0, 1.0, 2.6}, {0, 1, 0, 1}), std::vector<int>({3}));
  EXPECT_TRUE(named({1.0, 9.0}, {0, 1}).empty());  // alone in its stage
  EXPECT_TRUE(named({0.0, 1.0}, {0, 0}).empty());  // a rank without timed steps is neither named nor a peer
  EXPECT_EQ(named({1.0, 1.3, 0.0}, {0, 0, 0}), std::vector<int>({1}));
}

TEST(Stragglers, PassTimesLeaveOutTheWaitsInsideAPass) {
  Tracer t;
  t.configure(false, 0, false, 0);
  t.time_passes(true);
  double pass = 0;
  {
    Tracer::Scope f(t, EventKind::forward, 0);
    const double start = t.now();
    t.record(EventKind::tp_collective, 0, -1, 1.0, 1.25);  // blocking, inside the pass
    t.record(EventKind::cp_shift, 0, -1, 1.0, 2.0);        // overlapped: its wait comes by note_wait
    t.note_wait(0.5);
    while (t.now() - start < 1e-3) {
    }
    pass = t.now() - start;
  }
  t.record(EventKind::allreduce_wait, 0, -1, 3.0, 3.125);  // outside the pass
  t.record(EventKind::optimizer, 0, -1, 4.0, 5.0);         // neither
  const Tracer::PassTimes times = t.take_pass_times();
  EXPECT_NEAR(times.wait, 0.25 + 0.5 + 0.125, 1e-12);
  EXPECT_NEAR(times.compute, pass - 0.75, 1e-4);
  EXPECT_TRUE(t.events().empty());  // timing without a trace records no event
  const Tracer::PassTimes again = t.take_pass_times();
  EXPECT_EQ(again.compute, 0);
  EXPECT_EQ(again.wait, 0);

  Tracer off;  // no timing, no trace: nothing measured
  off.configure(false, 0, false, 0);
  { Tracer::Scope f(off, EventKind::forward, 0); }
  off.record(EventKind::allreduce_wait, 0, -1, 0, 1);
  EXPECT_EQ(off.take_pass_times().wait, 0);
}
