// Sharded data parallelism (parallel.zero = 1, 2, 3) against the one-rank run: 6-step losses to
// 1e-5, parameters afterwards, identical replicas; alone (dp 2, dp 4, with gradient accumulation)
// and with the pipeline (dp 2 x pp 2, 1F1B). Memory at rest shrinks with the group; checkpoints
// move between a ZeRO-3 layout and one rank both ways.
#include <cstdio>

#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
constexpr int kSteps = 6;

RunConfig zero_config(int zero, int dp, int pp = 1, int microbatches = 1) {
  RunConfig c = tiny_config(data_dir());
  c.train.steps = kSteps;
  c.parallel.zero = zero, c.parallel.dp = dp, c.parallel.pp = pp;
  c.parallel.microbatches = microbatches;
  c.parallel.bucket_mb = 0.01;  // several buckets per block even at this size
  return c;
}
}  // namespace

TEST(Zero, EveryLevelMatchesOneRank) {
  for (int zero : {1, 2, 3})
    for (int dp = 2; dp <= world_size(); dp *= 2) {
      RunConfig c = zero_config(zero, dp, 1, 8 / dp / 2 > 0 ? 2 : 1);  // accumulate over 2 microbatches
      MPI_Comm g;
      const Result r = train_on_groups(c, dp, &g, kSteps);
      expect_matches_reference(r, g, "zero " + std::to_string(zero) + " dp " + std::to_string(dp));
      MPI_Comm_free(&g);
    }
}

TEST(Zero, EveryLevelWithThePipeline) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (int zero : {1, 2, 3}) {
    RunConfig c = zero_config(zero, 2, 2, 2);
    c.parallel.schedule = "1f1b";
    MPI_Comm g;
    const Result r = train_on_groups(c, 4, &g, kSteps);
    expect_matches_reference(r, g, "zero " + std::to_string(zero) + " dp 2 x pp 2");
    MPI_Comm_free(&g);
  }
}

TEST(Zero, MemoryAtRestShrinksWithTheGroup) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  auto memory = [](const RunConfig& c, MPI_Comm comm) {
    TrainOptions o;
    o.quiet = true;
    Trainer t(c, environment(), o, comm);
    t.train_step();
    return t.memory();
  };
  MPI_Comm self;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  const MemoryUse one = memory(zero_config(0, 1), self);
  MPI_Comm_free(&self);
  const double whole = double(one.params + one.grads + one.optimizer);
  for (int zero : {1, 3}) {
    MPI_Comm g;
    MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &g);
    const MemoryUse m = memory(zero_config(zero, 4), g);
    MPI_Comm_free(&g);
    const double total = double(m.params + m.grads + m.optimizer);
    if (rank_of(MPI_COMM_WORLD) == 0)
      std::printf("zero %d, dp 4: params %zu grads %zu optimizer %zu bytes; one rank %zu %zu %zu\n", zero, m.params,
                  m.grads, m.optimizer, one.params, one.grads, one.optimizer);
    if (zero == 1) EXPECT_LE(double(m.optimizer), 0.3 * double(one.optimizer));
    if (zero == 3) EXPECT_LE(total, 0.35 * whole);
  }
}

TEST(Zero, CheckpointsMoveBetweenZero3AndOneRank) {
  expect_checkpoints_move(zero_config(3, 2), zero_config(0, 1), kSteps, "zero 3 dp 2", "zero-ckpt");
}
