// Data and pipeline parallel runs against the one-rank run on the same data (shuffle off): the loss
// sequence to 1e-5 relative, the parameters afterwards, bit-identical replicas after every step,
// and the pipeline forward for 1, 2, 4, 8 microbatches.
#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

TEST(Parallel, GradientAccumulationEqualsUnsplitBatch) {
  RunConfig c = tiny_config(data_dir());
  c.parallel.microbatches = 4;
  MPI_Comm self;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  expect_matches_reference(train(c, self), self, "1 rank, 4 microbatches");
  MPI_Comm_free(&self);
}

TEST(Parallel, DataParallelMatchesOneRank) {
  for (int dp = 2; dp <= world_size(); dp *= 2) {
    RunConfig c = tiny_config(data_dir());
    c.parallel.dp = dp;
    MPI_Comm g;
    const Result r = train_on_groups(c, dp, &g);
    expect_matches_reference(r, g, "dp=" + std::to_string(dp));
    MPI_Comm_free(&g);
  }
}

TEST(Parallel, PipelineMatchesOneRankForEverySchedule) {
  for (int pp = 2; pp <= world_size(); pp *= 2)
    for (const char* sched : {"naive", "gpipe", "1f1b"}) {
      RunConfig c = tiny_config(data_dir());
      c.parallel.pp = pp;
      c.parallel.schedule = sched;
      c.parallel.microbatches = std::string(sched) == "naive" ? 1 : 4;
      MPI_Comm g;
      const Result r = train_on_groups(c, pp, &g);
      expect_matches_reference(r, g, "pp=" + std::to_string(pp) + " " + sched);
      // Saved activations: 1F1B holds at most p - stage microbatches, GPipe all m, naive one.
      const int m = c.parallel.microbatches;
      const int bound = std::string(sched) == "1f1b" ? std::min(m, r.stages - r.stage) : std::string(sched) == "gpipe" ? m : 1;
      EXPECT_EQ(r.peak_slots, bound) << "pp=" << pp << " " << sched << " stage " << r.stage;
      MPI_Comm_free(&g);
    }
}

TEST(Parallel, HybridDataTimesPipelineMatchesOneRank) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const char* sched : {"naive", "gpipe", "1f1b"}) {
    RunConfig c = tiny_config(data_dir());
    c.parallel.dp = 2, c.parallel.pp = 2;
    c.parallel.schedule = sched;
    c.parallel.microbatches = std::string(sched) == "naive" ? 1 : 2;
    MPI_Comm g;
    const Result r = train_on_groups(c, 4, &g);
    expect_matches_reference(r, g, std::string("dp=2 x pp=2 ") + sched);
    MPI_Comm_free(&g);
  }
}

TEST(Parallel, PipelineForwardMatchesOneRankForAnyMicrobatchCount) {
  for (int pp = 2; pp <= world_size(); pp *= 2)
    for (int m : {1, 2, 4, 8}) {
      RunConfig c = tiny_config(data_dir());
      c.parallel.pp = pp;
      c.parallel.microbatches = m;
      MPI_Comm g;
      const Result r = train_on_groups(c, pp, &g, 0);
      EXPECT_NEAR(r.eval, reference().eval, 1e-6 * reference().eval) << "pp=" << pp << " m=" << m;
      MPI_Comm_free(&g);
    }
}

// The pipeline frontier on an 8-layer model: interleaved 1F1B (two chunks per rank), ZB-H1 and ZB-V
// (backwards split into B and W, the V's two chunks) against one rank over 6 steps.
TEST(Parallel, InterleavedAndZeroBubbleSchedulesMatchOneRank) {
  struct Case {
    const char* schedule;
    int pp, dp, virtual_stages, microbatches;
  };
  for (const Case& k : {Case{"interleaved", 2, 1, 2, 4}, Case{"interleaved", 4, 1, 2, 4}, Case{"zb-h1", 2, 1, 1, 4},
                        Case{"zb-h1", 4, 1, 1, 4}, Case{"zb-h1", 2, 2, 1, 2}, Case{"zb-v", 2, 1, 1, 4},
                        Case{"zb-v", 4, 1, 1, 4}}) {
    const int ranks = k.pp * k.dp;
    if (ranks > world_size()) continue;
    RunConfig c = tiny_config(data_dir());
    c.model.n_layer = 8;
    c.train.steps = 6;
    c.parallel.schedule = k.schedule;
    c.parallel.pp = k.pp, c.parallel.dp = k.dp;
    c.parallel.virtual_stages = k.virtual_stages;
    c.parallel.microbatches = k.microbatches;
    MPI_Comm g;
    const Result r = train_on_groups(c, ranks, &g);
    expect_matches_reference(r, g, std::string(k.schedule) + " pp=" + std::to_string(k.pp) + " dp=" + std::to_string(k.dp), &c);
    MPI_Comm_free(&g);
  }
}
