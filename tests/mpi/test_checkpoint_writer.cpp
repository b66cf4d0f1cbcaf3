// The HDF5 checkpoint writer (parallel/checkpoint_writer) on every rank of the world: each rank
// writes what it holds -- scattered ZeRO-like ranges, or its tensor-parallel part -- and the file
// read back holds the global values exactly, with checksums that verify. Both ways of writing: from
// the state (write_section) and from a staged copy (write_local), through write buffers of two
// blocks (so runs cross buffers and blocks, and ranks share blocks at their pieces' ends).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "equivalence.hpp"
#include "formats/checkpoint_h5.hpp"
#include "parallel/checkpoint_writer.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.n_layer = 2, m.n_head = 2, m.n_embd = 16, m.vocab_size = 50, m.block_size = 8;
  return m;
}

// Any values, but zero in wte's padded rows (as the model keeps them: the file does not store them).
float global_value(int section, size_t i) {
  const ModelConfig m = small_model();
  if (i >= size_t(m.vocab_size) * size_t(m.n_embd) && i < size_t(m.padded_vocab()) * size_t(m.n_embd)) return 0;
  return float(std::sin(0.37 * double(i) + section)) * float(1 + section);
}

std::string shared_path(const std::string& name) {
  int64_t pid = int64_t(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() / ("gpt2_ckw_" + std::to_string(pid) + "_" + name + ".h5")).string();
}

// What this rank holds of each section: `ranges` of its local layout (all of it when empty).
constexpr float kPadding = -7777.0f;  // a shard's padding between the runs: no value of the file
struct Held {
  StageLayout layout;
  std::vector<ParamStore::Owned> owned;  // per section, with values
};

Held hold(const ModelConfig& m, TpSplit tp, const std::vector<Range>& ranges, const std::vector<std::string>& sections) {
  Held h{StageLayout(ParamLayout(m), 0, m.n_layer, tp), {}};
  for (size_t s = 0; s < sections.size(); ++s) {
    std::vector<float> local(h.layout.local_size());
    global_to_local(
        h.layout,
        [&](size_t b, size_t n, float* dst) {
          for (size_t k = 0; k < n; ++k) dst[k] = global_value(int(s), b + k);
        },
        local.data());
    ParamStore::Owned o;
    o.sharded = !ranges.empty();
    o.ranges = ranges.empty() ? std::vector<Range>{{0, local.size()}} : ranges;
    for (const Range& r : o.ranges) {  // sharded: 3 values of padding before each run, never written
      if (o.sharded) o.values.insert(o.values.end(), 3, kPadding);
      o.at.push_back(o.values.size());
      o.values.insert(o.values.end(), local.begin() + long(r.begin), local.begin() + long(r.end));
    }
    h.owned.push_back(o);
  }
  return h;
}

// tp: the tensor-parallel group the writer joins split tensors over. Returns the runs this rank wrote.
size_t write_and_check(const std::string& name, const ModelConfig& m, const Held& h, bool replica_0, bool local,
                       MPI_Comm tp = MPI_COMM_SELF) {
  const std::vector<std::string> sections = {"params", "opt.m"};
  CheckpointMeta meta;
  meta.model = m;
  meta.step = 7;
  meta.optimizer = "adamw";
  const std::string path = shared_path(name), tmp = path + ".tmp";
  size_t pieces = 0;
  {
    // Two blocks a buffer: the runs cross buffers, blocks and ranks' pieces everywhere.
    const size_t buffer = 2 * DirectWriter::kBlock;
    H5CheckpointWriter w(path, tmp, MPI_COMM_WORLD, meta, h.layout, replica_0, sections, tp, buffer);
    if (local) {
      w.write_local(h.owned);
    } else {
      for (size_t s = 0; s < sections.size(); ++s) {
        ParamStore::Owned ranges = h.owned[s];
        ranges.values.clear();
        w.write_section(sections[s], ranges, [&](size_t b, size_t n, float* dst) {
          ASSERT_LE(n * 4, buffer) << "a fill larger than a write buffer";
          std::copy(h.owned[s].values.begin() + long(b), h.owned[s].values.begin() + long(b + n), dst);
        });
      }
    }
    w.finish();
    pieces = w.pieces_written();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(std::filesystem::exists(tmp)) << name;
  if (rank_of(MPI_COMM_WORLD) == 0) {
    const H5CheckpointReader r(path);
    EXPECT_NO_THROW(r.verify()) << name;
    EXPECT_EQ(r.meta().step, 7);
    const size_t total = ParamLayout(m).total();
    for (size_t s = 0; s < sections.size(); ++s) {
      std::vector<float> got(total);
      r.read(sections[s], 0, total, got.data());
      size_t wrong = 0;
      for (size_t i = 0; i < total; ++i) wrong += got[i] != global_value(int(s), i);
      EXPECT_EQ(wrong, 0u) << name << ": " << sections[s] << " has " << wrong << " of " << total << " values wrong";
    }
    std::filesystem::remove(path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return pieces;
}

}  // namespace

TEST(CheckpointWriter, ScatteredRangesOfEveryRankMakeTheGlobalTensors) {
  const ModelConfig m = small_model();
  const int rank = rank_of(MPI_COMM_WORLD), size = world_size();
  const size_t n = StageLayout(ParamLayout(m), 0, m.n_layer).local_size();
  std::vector<Range> mine;  // blocks of 97 dealt round-robin: ragged, crossing tensor bounds
  for (size_t b = 0, k = 0; b < n; b += 97, ++k)
    if (int(k % size_t(size)) == rank) mine.push_back({b, std::min(n, b + 97)});
  const Held h = hold(m, {}, mine, {"params", "opt.m"});
  write_and_check("scattered_section", m, h, rank == 0, false);
  write_and_check("scattered_local", m, h, rank == 0, true);
}

TEST(CheckpointWriter, TensorParallelPartsMakeTheGlobalTensors) {
  if (world_size() != 2) GTEST_SKIP() << "tp 2 over the world";
  const ModelConfig m = small_model();
  const Held h = hold(m, TpSplit{2, rank_of(MPI_COMM_WORLD)}, {}, {"params", "opt.m"});
  write_and_check("tp_section", m, h, true, false);
  write_and_check("tp_local", m, h, true, true);
}

// With the tp group given, the column slices are joined into whole rows on one rank each: a tensor
// (a section's dataset) is written as one run, not a run per row per rank; also where the ranks
// hold their slices as ZeRO-like ranges cut mid-tensor (the group's ranks hold the same ranges).
TEST(CheckpointWriter, TensorParallelSlicesAreJoinedIntoWholeRows) {
  if (world_size() != 2) GTEST_SKIP() << "tp 2 over the world";
  const ModelConfig m = small_model();
  const TpSplit tp{2, rank_of(MPI_COMM_WORLD)};
  const Held h = hold(m, tp, {}, {"params", "opt.m"});
  const size_t datasets = 2 * ParamLayout(m).tensors().size();
  const size_t apart = write_and_check("tp_apart", m, h, true, false);
  const size_t joined = write_and_check("tp_joined", m, h, true, false, MPI_COMM_WORLD);
  EXPECT_LE(joined, datasets) << "runs written by rank " << tp.rank;
  EXPECT_LT(joined * 3, apart) << "the join should cut the runs written several times over";
  const size_t n = StageLayout(ParamLayout(m), 0, m.n_layer, tp).local_size();
  const Held shards = hold(m, tp, {{0, n / 3}, {n / 3, n}}, {"params", "opt.m"});
  write_and_check("tp_joined_shards", m, shards, true, false, MPI_COMM_WORLD);
}
