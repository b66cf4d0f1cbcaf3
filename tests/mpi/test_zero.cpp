// Sharded data parallelism (parallel.zero = 1, 2, 3) against the one-rank run: 6-step losses to
// 1e-5, parameters afterwards, identical replicas; alone (dp 2, dp 4, with gradient accumulation)
// and with the pipeline (dp 2 x pp 2, 1F1B). Memory at rest shrinks with the group; checkpoints
// move between a ZeRO-3 layout and one rank both ways.
#include <cstdio>

#include "../common/store_training.hpp"
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
    if (zero == 1) {
      EXPECT_LE(double(m.optimizer), 0.3 * double(one.optimizer));
    }
    if (zero == 3) {
      EXPECT_LE(total, 0.35 * whole);
    }
  }
}

TEST(Zero, CheckpointsMoveBetweenZero3AndOneRank) {
  if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "needs 2 ranks";
  expect_checkpoints_move(zero_config(3, 2), zero_config(0, 1), kSteps, "zero 3 dp 2", "zero-ckpt");
}

// Mixed precision: the parameter all-gather moves a block's matrices as their 16-bit working copy
// (half the bytes) and the LayerNorms and biases beside them in fp32, packed rank by rank. Trained
// through a ParamStore on groups of 2 and 4 ranks, bit for bit as a store that gathers fp32 and
// rounds per GEMM; the blocks' gathers deliver half the fp32 bytes plus the packed fp32 values.
namespace {
void expect_sixteen_bit_gathers_train_as_fp32(Precision precision, int zero, int dp) {
  RunConfig c = tiny_config(data_dir());
  const ParamLayout layout(c.model);
  const StageLayout sl(layout, {{0, c.model.n_layer}}, {}, zero > 0 ? size_t(dp) : 1);
  MPI_Comm g;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) / dp, 0, &g);
  const std::string what = std::string(precision_name(precision)) + ", zero " + std::to_string(zero) + ", dp " +
                           std::to_string(dp) + ", rank " + std::to_string(rank_of(g));
  {
    auto comm = make_communicator(test_comm(), g);
    OptimizerConfig oc;
    oc.weight_decay = 0.1;
    Tracer with_trace, without_trace;
    with_trace.configure(true, 1 << 20, false, 0);
    without_trace.configure(true, 1 << 20, false, 0);
    ParamStore with(sl, *comm, zero_policy(zero), 100, "adamw", oc, with_trace, DType::f32, precision);
    ParamStore without(sl, *comm, zero_policy(zero), 100, "adamw", oc, without_trace, DType::f32, precision, false);
    const uint64_t seed = 11 + uint64_t(rank_of(g));  // each rank its own tokens
    const std::vector<float> got = train_through_store(with, sl, precision, seed, 4);
    const std::vector<float> ref = train_through_store(without, sl, precision, seed, 4);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], ref[i]) << what << ", loss " << i;
    const std::vector<float> pw = with.local_values("params"), pr = without.local_values("params");
    for (size_t i = 0; i < pw.size(); ++i) ASSERT_EQ(pw[i], pr[i]) << what << ", parameter " << i;
    // The blocks' gathers: 2 bytes a matrix value, and at most D x 4 bytes a LayerNorm or bias value.
    auto block_bytes = [&](const ParamStore& s, const Tracer& t) {
      double bytes = 0;
      for (const Event& e : t.events())
        if (e.kind == int32_t(EventKind::all_gather_issue) &&
            sl.units()[size_t(s.shards().buckets()[size_t(e.microbatch)].unit)].kind == UnitKind::block)
          bytes += double(e.bytes);
      return bytes;
    };
    size_t block_values = 0, small = 0;
    for (const TensorInfo& t : sl.tensors())
      if (t.layer >= 0) block_values += t.range.size(), small += t.shape.size() == 1 ? t.range.size() : 0;
    const double b16 = block_bytes(with, with_trace), b32 = block_bytes(without, without_trace);
    const double times = b32 / (4.0 * double(block_values));  // the blocks' gathers (ZeRO-3: several a step)
    ASSERT_GE(times, 4.0) << what;
    EXPECT_LE(b16, 0.5 * b32 + times * 4.0 * dp * double(small)) << what << ", fp32 " << b32 << " bytes";
  }
  MPI_Comm_free(&g);
}
}  // namespace

TEST(Zero, SixteenBitGathersTrainAsFp32GathersRoundedPerGemm) {
  for (int dp = 2; dp <= std::min(4, world_size()); dp *= 2)
    for (int zero : {1, 3})
      for (Precision p : {Precision::bf16, Precision::fp16}) expect_sixteen_bit_gathers_train_as_fp32(p, zero, dp);
  expect_sixteen_bit_gathers_train_as_fp32(Precision::bf16, 2, 2);
}
