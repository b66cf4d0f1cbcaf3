// Data and pipeline parallel runs against the one-rank run on the same data (shuffle off): the loss
// sequence to 1e-5 relative, the parameters afterwards, bit-identical replicas after every step,
// and the pipeline forward for 1, 2, 4, 8 microbatches.
#include "equivalence.hpp"
#include "pipeline/schedule_file.hpp"

using namespace gpt2;
using namespace gpt2::test;

TEST(Parallel, GradientAccumulationEqualsUnsplitBatch) {
  const RunConfig whole = tiny_config(data_dir());
  RunConfig c = whole;
  c.parallel.microbatches = 4;
  MPI_Comm self;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  expect_matches_reference(train(c, self), self, "1 rank, 4 microbatches", &whole);
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
      // Saved activations: 1F1B holds at most p - stage microbatches, GPipe all m, naive one. (On an
      // ordered communicator a slot stays until the next stage has received its activation.)
      const int m = c.parallel.microbatches;
      const int bound = std::string(sched) == "1f1b" ? std::min(m, r.stages - r.stage) : std::string(sched) == "gpipe" ? m : 1;
      if (!issue_ordered_test_comm()) {
        EXPECT_EQ(r.peak_slots, bound) << "pp=" << pp << " " << sched << " stage " << r.stage;
      }
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
// (backwards split into B and W, the V's two chunks), interleaved zero bubble and DualPipeV (paired
// passes, split and whole backwards mixed) against one rank over 6 steps.
TEST(Parallel, InterleavedAndZeroBubbleSchedulesMatchOneRank) {
  struct Case {
    const char* schedule;
    int pp, dp, virtual_stages, microbatches;
  };
  for (const Case& k : {Case{"interleaved", 2, 1, 2, 4}, Case{"interleaved", 4, 1, 2, 4}, Case{"zb-h1", 2, 1, 1, 4},
                        Case{"zb-h1", 4, 1, 1, 4}, Case{"zb-h1", 2, 2, 1, 2}, Case{"zb-v", 2, 1, 1, 4},
                        Case{"zb-v", 4, 1, 1, 4}, Case{"interleaved-zb", 2, 1, 2, 4},
                        Case{"interleaved-zb", 4, 1, 2, 4}, Case{"dualpipev", 2, 1, 1, 4}, Case{"dualpipev", 4, 1, 1, 8},
                        Case{"dualpipev", 2, 2, 1, 4}}) {
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

// Every registered schedule at four stages and sixteen microbatches (a microbatch of one sequence),
// the depth at which a later stage's sends outnumber its message buffers: the executor must reclaim
// a buffer outside the group it issues (NCCL's rule, which mpi-ordered enforces -- its host runs
// ahead of a device whose sends look unfinished). Against one rank over 3 steps.
TEST(Parallel, EveryScheduleAtFourStagesAndSixteenMicrobatches) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const ScheduleEntry& e : ScheduleRegistry::entries()) {
    RunConfig c = tiny_config(data_dir());
    c.model.n_layer = 8;
    c.train.batch_size = 16;
    c.parallel.schedule = e.name;
    c.parallel.pp = 4, c.parallel.microbatches = 16;
    c.parallel.virtual_stages = e.chunks == 0 ? 2 : 1;
    MPI_Comm g;
    const Result r = train_on_groups(c, 4, &g);
    expect_matches_reference(r, g, e.name + " pp=4 m=16", &c);
    MPI_Comm_free(&g);
  }
}

// A schedule read from a file (parallel.schedule_file), one no built-in makes: GPipe's order over
// two chunks a rank in a loop, the backward split, the W passes of one chunk run between the B
// passes of the other. Against one rank over 6 steps on an 8-layer model.
TEST(Parallel, ScheduleFromAFileMatchesOneRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const ScheduleFile f = parse_schedule_file(
      "split-gpipe.sched",
      "name = split-gpipe\nplacement = loop\nchunks = 2\n"
      "rank 0: F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 B0.1 B1.1 B2.1 B3.1 B0 W0.1 B1 W1.1 B2 W2.1 B3 W3.1 W0 W1 W2 W3\n"
      "rank 1: F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 B0.1 W0.1 B1.1 W1.1 B2.1 W2.1 B3.1 W3.1 B0 B1 B2 B3 W0 W1 W2 W3\n");
  RunConfig c = tiny_config(data_dir());
  c.model.n_layer = 8;
  c.train.steps = 6;
  c.parallel.schedule = register_schedule_file(f);
  c.parallel.pp = 2, c.parallel.microbatches = 4;
  c.validate(2);  // the file's shape and a simulated run, as a deck naming it gets
  MPI_Comm g;
  const Result r = train_on_groups(c, 2, &g);
  expect_matches_reference(r, g, "schedule file split-gpipe pp=2", &c);
  // GPipe's memory: every microbatch of both chunks held until its W.
  EXPECT_EQ(r.peak_slots, 2 * 4);
  MPI_Comm_free(&g);
}

// Evaluation after training, for every schedule, with messages above MPI's eager size (a send that
// completes only once matched, as on a GPU): the validation loss equals one rank's. Interleaved
// evaluation hung here while its forward-only list waited for each send to complete.
TEST(Parallel, EveryScheduleEvaluatesAfterTrainingWithLargeMessages) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto train_then_evaluate = [](const RunConfig& c, MPI_Comm comm) {
    TrainOptions o;
    o.quiet = true;
    Trainer t(c, environment(), o, comm);
    std::vector<double> out;
    for (int s = 0; s < c.train.steps; ++s) out.push_back(t.train_step().loss);
    out.push_back(t.evaluate());
    return out;
  };
  RunConfig base = tiny_config(data_dir());
  base.model.n_layer = 4, base.model.n_embd = 256;  // a microbatch's activation: 2 x 16 x 256 floats, 32 KiB
  base.train.steps = 2;
  MPI_Comm self, pair;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  const std::vector<double> ref = train_then_evaluate(base, self);
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) / 2, 0, &pair);
  for (const char* sched : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "interleaved-zb", "dualpipev"}) {
    RunConfig c = base;
    c.parallel.pp = 2, c.parallel.microbatches = 4, c.parallel.schedule = sched;
    c.parallel.virtual_stages = std::string(sched).rfind("interleaved", 0) == 0 ? 2 : 1;
    const std::vector<double> got = train_then_evaluate(c, pair);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(got[i], ref[i], 1e-5 * ref[i]) << sched << (i + 1 == ref.size() ? ": validation loss" : ": step loss");
  }
  MPI_Comm_free(&pair);
  MPI_Comm_free(&self);
}
