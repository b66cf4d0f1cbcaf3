// Activation recomputation (train.recompute): the same math as keeping everything. Each mode on one
// rank gives the bits of a run without it; on the layouts that exercise its paths -- the pipeline
// (1F1B; ZB-H1, whose split backward recomputes before each of its passes; interleaved chunks),
// ZeRO-3 (the gathered block held over the recomputed forward and the backward), tensor parallelism
// with sequence parallelism (the block's collectives again), every other block -- the one-rank run's
// losses, norms and parameters.
#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
RunConfig with_recompute(const std::string& mode, int every = 1) {
  RunConfig c = tiny_config(data_dir());
  EXPECT_TRUE(c.train.recompute.assign(mode)) << mode;
  c.train.recompute_every = every;
  return c;
}
}  // namespace

TEST(Recompute, OneRankGivesTheBitsOfARunWithout) {
  const Result& ref = reference();
  for (const char* mode : {"selective", "full"}) {
    RunConfig c = with_recompute(mode);
    MPI_Comm self;
    MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
    const Result r = train(c, self);
    MPI_Comm_free(&self);
    ASSERT_EQ(r.losses.size(), ref.losses.size());
    for (size_t i = 0; i < r.losses.size(); ++i) {
      EXPECT_EQ(r.losses[i], ref.losses[i]) << mode << " step " << i + 1;
      EXPECT_EQ(r.grad_norms[i], ref.grad_norms[i]) << mode << " norm, step " << i + 1;
    }
    EXPECT_EQ(r.params, ref.params) << mode;
  }
}

TEST(Recompute, EveryModeOnTheLayoutsMatchesOneRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const RunConfig base = tiny_config(data_dir());
  struct Case {
    const char* name;
    void (*set)(RunConfig&);
  };
  const Case cases[] = {
      {"pp 2 1f1b", [](RunConfig& c) { c.parallel.pp = 2, c.parallel.microbatches = 4; }},
      {"pp 2 zb-h1", [](RunConfig& c) { c.parallel.pp = 2, c.parallel.microbatches = 4, c.parallel.schedule = "zb-h1"; }},
      {"pp 2 interleaved v2",
       [](RunConfig& c) { c.parallel.pp = 2, c.parallel.microbatches = 4, c.parallel.schedule = "interleaved", c.parallel.virtual_stages = 2; }},
      {"dp 2 zero 3", [](RunConfig& c) { c.parallel.dp = 2, c.parallel.zero = 3; }},
      {"tp 2 sp", [](RunConfig& c) { c.parallel.tp = 2, c.parallel.sequence_parallel = true; }},
  };
  for (const char* mode : {"selective", "full"})
    for (const Case& k : cases)
      for (int every : {1, 2}) {
        if (every == 2 && std::string(k.name) != "pp 2 1f1b") continue;  // (one layout is enough for the count)
        RunConfig c = with_recompute(mode, every);
        k.set(c);
        MPI_Comm g;
        const Result r = train_on_groups(c, 2, &g);
        expect_matches_reference(r, g, std::string(mode) + (every > 1 ? "/2 " : " ") + k.name, &base);
        MPI_Comm_free(&g);
      }
}
