#pragma once
// Shared by the MPI equivalence tests: a tiny model on a shard written once, a run of the Trainer on
// a group of ranks, and the comparison with the one-rank run on the same data (shuffle off): the
// loss sequence to 1e-5 relative, the parameters afterwards, bit-identical replicas after every step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "../common/tiny_data.hpp"
#include "formats/checkpoint.hpp"
#include "mpi_env.hpp"
#include "train/trainer.hpp"

namespace gpt2::test {


// GPT2_TEST_COMM=mpi-ordered runs the suites under NCCL's ordering (ctest label gpu_semantics);
// unset or empty: the default backend.
inline std::string test_comm() {
  const char* comm = std::getenv("GPT2_TEST_COMM");
  return comm && *comm ? comm : "auto";
}
// Whether the suites run under NCCL's issue order (mpi-ordered, nccl): a send completes only once
// received, so a saved activation may be held longer than the schedule needs.
inline bool issue_ordered_test_comm() { return test_comm() == "mpi-ordered" || test_comm() == "nccl"; }

inline RunConfig tiny_config(const std::string& data) {
  RunConfig c;
  c.parallel.comm = test_comm();
  c.model.n_layer = 4, c.model.n_head = 2, c.model.n_embd = 32, c.model.vocab_size = 64;
  c.model.block_size = 16;
  c.data.train = data + "/train.bin";
  c.data.val = data + "/train.bin";
  c.data.seq_len = 16;
  c.train.batch_size = 8;
  c.train.steps = 3;
  c.train.lr = 1e-3;
  c.train.eval_batches = 2;
  c.train.seed = 5;
  return c;
}

struct Result {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;  // global layout, on the run's rank 0
  double eval = 0;
  bool replicas_identical = true;
  int peak_slots = 0, stage = 0, stages = 1;  // this rank's most microbatches held at once
};

inline int rank_of(MPI_Comm c) {
  int r;
  MPI_Comm_rank(c, &r);
  return r;
}

inline void expect_device_discipline(Trainer& t) {
  ASSERT_TRUE(device_counters_installed());
  // A Kokkos that reports no fences (Debian's, without cmake/patches) would let every check of
  // waits below pass whatever the code does: refuse instead.
  ASSERT_TRUE(device_fences_reported())
      << "this Kokkos reports no fences (built without cmake/patches/kokkos-3.4.01-fence-hooks.patch): "
         "the device checks cannot run; build it with job_scripts/build_kokkos.sh";
  const DeviceCounters& c = t.step_counts();
  const int rank = rank_of(MPI_COMM_WORLD);
  std::string events;
  for (const std::string& l : t.step_events()) events += "\n  " + l;
  EXPECT_LE(c.device_waits, 1u) << "rank " << rank << ": whole-device waits in one step; its events:" << events;
  EXPECT_EQ(c.stream_waits, 0u) << "rank " << rank << ": stream waits in one step; its events:" << events;
  EXPECT_EQ(c.host_waits, 0u) << "rank " << rank << ": host waits for a communication in one step; its events:" << events;
  EXPECT_EQ(c.host_copies, 0u) << "rank " << rank << ": copies between device and pageable host memory in one step; "
                               << "its events:" << events;
  EXPECT_EQ(c.allocations, 0u) << "rank " << rank << ": allocations in a step (the first included); its events:" << events;
  EXPECT_EQ(c.frees, 0u) << "rank " << rank << ": frees in a step (the first included); its events:" << events;
  EXPECT_EQ(t.store().reducer().waits_for_buffers(), 0)
      << "rank " << rank << ": a gradient reduction waited for an earlier one to free its buffer";
}

inline Result train(RunConfig cfg, MPI_Comm comm, int steps = -1) {
  TrainOptions o;
  o.quiet = true;
  Trainer t(cfg, test::environment(), o, comm);
  Result r;
  r.eval = t.evaluate();
  for (int s = 0; s < (steps >= 0 ? steps : cfg.train.steps); ++s) {
    const StepMetrics m = t.train_step();
    r.losses.push_back(m.loss);
    r.grad_norms.push_back(m.grad_norm);
    // Every replica of a stage must hold the same bits after every step.
    const std::vector<float> p = t.local_params();
    uint64_t h = checksum(p.data(), p.size() * sizeof(float)), lo = h, hi = h;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, t.topology().dp_comm());
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, t.topology().dp_comm());
    r.replicas_identical = r.replicas_identical && lo == hi;
  }
  // What a GPU would do, counted where it happens: one whole-device wait a step at most (reading the
  // loss and the norm), no other host wait of any kind, no allocation or free in any step, the first
  // included -- on every layout.
  expect_device_discipline(t);
  r.params = t.gather_params();
  r.peak_slots = t.executor().peak_slots();
  r.stage = t.topology().stage(), r.stages = t.topology().pp();
  return r;
}

// A folder of this job's own (ctest runs several MPI test jobs at once; a folder per user was
// shared by them): the tag's folder, then world rank 0's pid.
inline std::string job_dir(const std::string& tag) {
  int64_t pid = int64_t(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  const std::string d = test::temp_dir(tag) + "/job" + std::to_string(pid);
  make_dirs(d, "test folder");
  return d;
}

// The data: one shard, written once by world rank 0.
inline std::string data_dir() {
  static std::string dir;
  if (dir.empty()) {
    dir = job_dir("parallel");
    if (rank_of(MPI_COMM_WORLD) == 0) write_shard(dir + "/train.bin", test::pseudo_text(20000, 64, 3));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return dir;
}

// One-rank reference of `steps` steps (the config's by default) of a configuration (the tiny one by
// default), computed on every rank by itself. It accumulates the layout's microbatches (all dp
// ranks' in turn): splitting a batch rounds its gradient differently, which Adam magnifies in the
// zero-initialised biases beyond 1e-4 on some CPUs; GradientAccumulationEqualsUnsplitBatch checks
// the split itself against the whole batch.
inline const Result& reference(int steps = -1, const RunConfig* config = nullptr) {
  static std::map<std::string, Result> refs;
  RunConfig c = config ? *config : tiny_config(data_dir());
  const int microbatches = c.parallel.dp * c.parallel.microbatches;
  c.parallel = ParallelConfig();  // one rank, plainly
  c.parallel.microbatches = microbatches;
  const std::string key = c.toml() + "#" + std::to_string(steps);
  auto it = refs.find(key);
  if (it == refs.end()) {
    MPI_Comm self;
    MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
    it = refs.emplace(key, train(c, self, steps)).first;
    MPI_Comm_free(&self);
  }
  return it->second;
}

// r against the one-rank run of the same model and data (base: the configuration r ran, any layout).
inline void expect_matches_reference(const Result& r, MPI_Comm comm, const std::string& what,
                                     const RunConfig* base = nullptr) {
  const RunConfig cfg = base ? *base : tiny_config(data_dir());
  const Result& ref = reference(int(r.losses.size()) == cfg.train.steps ? -1 : int(r.losses.size()), &cfg);
  EXPECT_TRUE(r.replicas_identical) << what << ": dp replicas diverged";
  ASSERT_EQ(r.losses.size(), ref.losses.size());
  for (size_t i = 0; i < r.losses.size(); ++i) {
    EXPECT_NEAR(r.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << what << " step " << i + 1;
    // The norm is summed in parts (units as they complete, shards, stages, tp ranks): all must count.
    EXPECT_NEAR(r.grad_norms[i], ref.grad_norms[i], 1e-5 * ref.grad_norms[i]) << what << " norm, step " << i + 1;
  }
  if (rank_of(comm) != 0) return;
  ASSERT_EQ(r.params.size(), ref.params.size()) << what;
  const ParamLayout layout(cfg.model);
  const size_t C = layout.config().n_embd;
  for (const TensorInfo& t : layout.tensors()) {
    // The key bias has an exactly-zero gradient (softmax shift invariance): Adam turns its
    // rounding noise into steps of +-lr, so it is only bounded, not compared.
    const bool kbias = t.kind == Param::qkvb;
    double num = 0, den = 0;
    for (size_t i = t.range.begin; i < t.range.end; ++i) {
      const double d = double(r.params[i]) - ref.params[i];
      if (kbias && i >= t.range.begin + C && i < t.range.begin + 2 * C) {
        EXPECT_LE(std::abs(d), 2 * 1e-3 * double(r.losses.size()) + 1e-6) << what << " " << t.name();
        continue;
      }
      num += d * d, den += double(ref.params[i]) * ref.params[i];
    }
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-4) << what << " " << t.name();
  }
}

// Runs cfg on groups of `ranks` consecutive world ranks (several groups side by side).
inline Result train_on_groups(const RunConfig& cfg, int ranks, MPI_Comm* group, int steps = -1) {
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) / ranks, 0, group);
  return train(cfg, *group, steps);
}

inline int world_size() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Checkpoints hold the global layout: `steps / 2` steps on one layout, a checkpoint, the rest on the
// other, both ways, give the unbroken one-rank run's losses (1e-5). `two` runs on pairs of ranks,
// `one` on each pair's first rank alone; `tag` names the checkpoint folder.
inline void expect_checkpoints_move(const RunConfig& two, const RunConfig& one, int steps, const std::string& what,
                                    const std::string& tag) {
  const std::string dir = job_dir(tag) + "/r" + std::to_string(rank_of(MPI_COMM_WORLD) / 2);
  const Result& ref = reference(steps, &one);
  auto half = [&](const RunConfig& base, MPI_Comm comm, bool resume) {
    RunConfig c = base;
    c.checkpoint.dir = dir;
    c.checkpoint.resume = resume ? Toggle::on : Toggle::off;
    TrainOptions o;
    o.quiet = true;
    Trainer t(c, environment(), o, comm);
    std::vector<double> losses;
    for (int s = 0; s < steps / 2; ++s) losses.push_back(t.train_step().loss);
    if (!resume) t.save_checkpoint();
    return losses;
  };
  MPI_Comm pair, self;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) / 2, 0, &pair);
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD), 0, &self);
  const bool leader = rank_of(pair) == 0;
  for (const bool two_first : {true, false}) {
    std::vector<double> losses;
    if (two_first) {
      losses = half(two, pair, false);
      MPI_Barrier(pair);
      if (leader) {
        const auto more = half(one, self, true);
        losses.insert(losses.end(), more.begin(), more.end());
      }
    } else {
      if (leader) losses = half(one, self, false);
      MPI_Barrier(pair);
      const auto more = half(two, pair, true);
      losses.insert(losses.end(), more.begin(), more.end());
    }
    MPI_Barrier(pair);
    if (!leader) continue;
    ASSERT_EQ(losses.size(), ref.losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], ref.losses[i], 1e-5 * ref.losses[i])
          << (two_first ? what + " -> one rank" : "one rank -> " + what) << ", step " << i + 1;
  }
  MPI_Comm_free(&pair);
  MPI_Comm_free(&self);
}

}  // namespace gpt2::test
