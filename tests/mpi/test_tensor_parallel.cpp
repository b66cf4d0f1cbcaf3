// Tensor parallelism (Megatron's split, vocabulary-parallel embedding and loss, sequence
// parallelism) in every layout against the one-rank run of the same model: 6-step losses to 1e-5,
// the parameters afterwards (assembled from the tp ranks' parts), identical replicas; and the
// parameter memory a tp rank holds.
#include <cstdio>

#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
constexpr int kSteps = 6;

// Four heads (tp up to 4), the tiny model's vocabulary of 64 padded to 128: with tp 2 the second
// rank's vocabulary rows are all padding.
RunConfig tp_config(int tp, int dp = 1, int pp = 1, int microbatches = 1) {
  RunConfig c = tiny_config(data_dir());
  c.model.n_head = 4;
  c.train.steps = kSteps;
  c.parallel.tp = tp, c.parallel.dp = dp, c.parallel.pp = pp;
  c.parallel.microbatches = microbatches;
  return c;
}

void expect_layout_matches(const RunConfig& c, const std::string& what) {
  const int ranks = c.parallel.dp * c.parallel.pp * c.parallel.tp;
  if (world_size() < ranks) {
    if (rank_of(MPI_COMM_WORLD) == 0) std::printf("(skipped %s: needs %d ranks)\n", what.c_str(), ranks);
    return;
  }
  MPI_Comm g;
  const Result r = train_on_groups(c, ranks, &g, kSteps);
  expect_matches_reference(r, g, what, &c);
  MPI_Comm_free(&g);
}
}  // namespace

TEST(TensorParallel, AloneMatchesOneRank) {
  expect_layout_matches(tp_config(2), "tp 2");
  expect_layout_matches(tp_config(4), "tp 4");
}

TEST(TensorParallel, WithDataParallelAndPipelineMatchesOneRank) {
  expect_layout_matches(tp_config(2, 2), "tp 2 x dp 2");
  RunConfig pipe = tp_config(2, 1, 2, 2);
  pipe.parallel.schedule = "1f1b";
  expect_layout_matches(pipe, "tp 2 x pp 2");
  RunConfig three = tp_config(2, 2, 2, 2);
  three.parallel.schedule = "1f1b";
  expect_layout_matches(three, "dp 2 x tp 2 x pp 2");
}

TEST(TensorParallel, WithShardedDataParallelMatchesOneRank) {
  for (int zero : {1, 2, 3}) {
    RunConfig c = tp_config(2, 2, 1, 2);
    c.parallel.zero = zero;
    expect_layout_matches(c, "tp 2 x dp 2, zero " + std::to_string(zero));
  }
}

TEST(TensorParallel, SequenceParallelMatchesOneRank) {
  RunConfig c = tp_config(2);
  c.parallel.sequence_parallel = true;
  expect_layout_matches(c, "tp 2, sequence parallel");
  RunConfig four = tp_config(4, 1, 1, 2);
  four.parallel.sequence_parallel = true;
  expect_layout_matches(four, "tp 4, sequence parallel, 2 microbatches");
  RunConfig pipe = tp_config(2, 1, 2, 2);
  pipe.parallel.sequence_parallel = true;
  expect_layout_matches(pipe, "tp 2 x pp 2, sequence parallel");
}

// Any tp writes the global layout and any tp reads it.
TEST(TensorParallel, CheckpointsMoveBetweenTp2AndOneRank) {
  if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "needs 2 ranks";
  expect_checkpoints_move(tp_config(2), tp_config(1), kSteps, "tp 2", "tp-ckpt");
}

TEST(TensorParallel, EachRankHoldsAboutHalfTheParameters) {
  if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm self, pair;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) / 2, 0, &pair);
  TrainOptions o;
  o.quiet = true;
  const size_t one = Trainer(tp_config(1), environment(), o, self).memory().params;
  const size_t two = Trainer(tp_config(2), environment(), o, pair).memory().params;
  if (rank_of(MPI_COMM_WORLD) == 0) std::printf("parameter bytes: one rank %zu, tp 2 rank %zu\n", one, two);
  EXPECT_LE(double(two), 0.6 * double(one));
  MPI_Comm_free(&self);
  MPI_Comm_free(&pair);
}
