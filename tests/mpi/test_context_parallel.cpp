// Context parallelism (parallel.cp): each sequence cut into 2cp chunks, rank i of the cp group holding
// chunks i and 2cp-1-i, attention as ring attention. Against the one-rank run (losses and norms to
// 1e-5, parameters, identical replicas): cp 2 and 4 alone, and with dp (the gradients averaged over
// dp x cp), ZeRO-3 (sharded over dp x cp), tp with sequence parallelism, the pipeline (1F1B) and
// full recomputation (the ring runs again in the backward); and in bf16.
#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

TEST(ContextParallel, EveryCompositionMatchesOneRank) {
  const RunConfig base = tiny_config(data_dir());
  struct Case {
    const char* name;
    int ranks;
    void (*set)(RunConfig&);
  };
  const Case cases[] = {
      {"cp 2", 2, [](RunConfig& c) { c.parallel.cp = 2; }},
      {"cp 4", 4, [](RunConfig& c) { c.parallel.cp = 4; }},
      {"cp 2 x dp 2", 4, [](RunConfig& c) { c.parallel.cp = 2, c.parallel.dp = 2; }},
      {"cp 2 x dp 2 zero 3", 4, [](RunConfig& c) { c.parallel.cp = 2, c.parallel.dp = 2, c.parallel.zero = 3; }},
      {"cp 2 x tp 2 sp", 4, [](RunConfig& c) { c.parallel.cp = 2, c.parallel.tp = 2, c.parallel.sequence_parallel = true; }},
      {"cp 2 x pp 2 1f1b", 4, [](RunConfig& c) { c.parallel.cp = 2, c.parallel.pp = 2, c.parallel.microbatches = 4; }},
      {"cp 2 recompute full", 2, [](RunConfig& c) { c.parallel.cp = 2, c.train.recompute = Recompute::full; }},
  };
  int ran = 0;
  for (const Case& k : cases) {
    if (k.ranks > world_size()) continue;
    RunConfig c = base;
    k.set(c);
    MPI_Comm g;
    const Result r = train_on_groups(c, k.ranks, &g);
    expect_matches_reference(r, g, k.name, &base);
    MPI_Comm_free(&g);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "needs 2 ranks";
}

// Under bf16 the attention output is kept in fp32 beside its 16-bit copy (the backward's row dots):
// cp 2 against one rank in bf16, to bf16's tolerance (the GEMMs round other shapes).
TEST(ContextParallel, Bf16MatchesOneRankInBf16) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  RunConfig base = tiny_config(data_dir());
  base.train.precision = Precision::bf16;
  RunConfig c = base;
  c.parallel.cp = 2;
  MPI_Comm g;
  const Result r = train_on_groups(c, 2, &g);
  MPI_Comm_free(&g);
  const Result& ref = reference(-1, &base);
  ASSERT_EQ(r.losses.size(), ref.losses.size());
  for (size_t i = 0; i < r.losses.size(); ++i) {
    EXPECT_NEAR(r.losses[i], ref.losses[i], 1e-4 * ref.losses[i]) << "step " << i + 1;
    EXPECT_NEAR(r.grad_norms[i], ref.grad_norms[i], 1e-2 * ref.grad_norms[i]) << "norm, step " << i + 1;
  }
}
