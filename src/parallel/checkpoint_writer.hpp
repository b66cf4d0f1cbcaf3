#pragma once
// Writes an HDF5 checkpoint (formats/checkpoint_h5.hpp) with every rank writing its own part; nothing
// is gathered. Three steps:
//   1. create (collective): world rank 0 makes the file -- the run's attributes and every dataset
//      allocated at its global shape, contiguous, unfilled, 4 KiB-aligned: the metadata, once -- and
//      tells every rank where each dataset's data starts;
//   2. write each section: what the rank holds of it (ParamStore::owned_ranges: the shard plan's
//      rows of each tensor of sharded state, the whole local state where dp replica 0 writes it --
//      tp rank 0 for tp-replicated tensors, stage 0 for wte), mapped through each tensor's GlobalMap
//      to runs of the file, coalesced, written by a DirectWriter. A tensor that tp splits into short
//      runs (a column slice of every row) is first joined into whole rows on one rank of the tp group
//      (join_tp; the tensors dealt out to balance the values each rank joins): long runs the disk
//      takes at its rate, where the slices would be many short writes through the page cache
//      (core/direct_writer.hpp: whole blocks through
//      O_DIRECT from aligned buffers that a thread writes while the next is filled, the ends through
//      the page cache). The values are copied into those buffers once -- from the state
//      (write_section, the synchronous path) or from a staged copy (write_local, checkpoint.async,
//      on a thread of its own: no MPI or HDF5 call) -- and checksummed in the same pass;
//   3. finish (collective): the ranks agree that every write succeeded (else every rank throws, one
//      message naming the file and the reason), sum each dataset's checksum over the ranks, rank 0
//      writes them as attributes and gives the file its name.
// The file is written under a temporary name until then; a writer that does not finish removes it.
// Each rank's time in each phase is kept (phases()) for the trace. Where each value goes in the file:
// parallel/checkpoint_file_map.hpp.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/direct_writer.hpp"
#include "formats/checkpoint.hpp"
#include "model/stage_layout.hpp"
#include "parallel/checkpoint_file_map.hpp"
#include "parallel/param_store.hpp"

namespace gpt2 {

class H5CheckpointWriter {
 public:
  // The direct writer's two buffers (16 MiB each): no rank holds more than its state and those.
  static constexpr size_t kBufferBytes = size_t(16) << 20;

  // Collective over world: creates `tmp`, which finish() renames to `path`. replica_0: this rank is in
  // dp replica 0 (writes unsharded state). tp: this rank's tensor-parallel group, whose column
  // slices write_section joins (MPI_COMM_SELF: none joined -- without tp, and for checkpoint.async,
  // whose staging must stay a memory copy). WriteError naming `path` when it cannot be created.
  H5CheckpointWriter(const std::string& path, const std::string& tmp, MPI_Comm world, const CheckpointMeta& meta,
                     const StageLayout& layout, bool replica_0, const std::vector<std::string>& sections,
                     MPI_Comm tp = MPI_COMM_SELF, size_t buffer_bytes = kBufferBytes);
  ~H5CheckpointWriter();  // rank 0 removes the temporary unless finish() succeeded
  H5CheckpointWriter(const H5CheckpointWriter&) = delete;
  H5CheckpointWriter& operator=(const H5CheckpointWriter&) = delete;

  // This rank's part of `section`, fetch(begin, n, dst) copying values [begin, begin + n) of what
  // the rank holds (`mine`: its ranges, ParamStore::owned_ranges) into the write buffers (n at most
  // a buffer's). Collective over the tp group (the join), over nothing else. A failure is kept for
  // finish().
  using Fetch = std::function<void(size_t begin, size_t n, float* dst)>;
  void write_section(const std::string& section, const ParamStore::Owned& mine, const Fetch& fetch);
  // Local (any thread; no MPI, no HDF5): this rank's part of every section from a staged copy
  // (staged[i]: what the rank holds of sections[i]), then the flush. Slices as they lie: a writer
  // made with a tp group (which joins them) writes with write_section.
  void write_local(const std::vector<ParamStore::Owned>& staged);
  // Collective: WriteError (CollectiveError) on every rank if any rank's write failed; else the
  // checksums go in and the file takes its name.
  void finish();

  const std::string& path() const { return path_; }
  size_t bytes_written() const { return tally_.bytes; }    // by this rank
  size_t pieces_written() const { return tally_.pieces; }  // runs of the file this rank wrote
  // Seconds this rank spent in each phase of the write (for the trace and the benchmark): making
  // the file's metadata (rank 0; the others wait), copying values into the write buffers (staging
  // or fetching, joining tp's slices, the checksum in the same pass), waiting for the disk (the
  // buffers' writes and the flush), and agreeing and renaming.
  struct Phases {
    double create = 0, fill = 0, disk = 0, finish = 0;
  };
  const Phases& phases() const { return phases_; }

 private:
  using Piece = CheckpointFileMap::Piece;
  std::vector<uint64_t> create(const CheckpointMeta& meta);  // world rank 0: the file; its datasets' offsets
  struct Joined {               // the runs a rank writes for its tp group
    std::vector<Piece> pieces;  // (joined: into values)
    std::vector<float> values;
  };
  // Collective over tp: this rank's pieces of the section's tp-split tensors to their joiners; the
  // joined runs this rank writes.
  Joined join_tp(size_t section, const ParamStore::Owned& mine, const Fetch& fetch);
  // The pieces of a section through the direct writer, values from fetch (as write_section's);
  // host_threads: the checksums on the host's threads (not from the background writer's thread).
  void write_pieces(const std::vector<Piece>& ps, const Fetch& fetch, bool host_threads);
  void flush();  // the direct writer's end: its error kept, the disk time counted

  std::string path_, tmp_;
  MPI_Comm world_, tp_;
  int rank_ = 0, tp_size_ = 1;
  size_t buffer_bytes_;
  std::vector<std::string> sections_;
  CheckpointFileMap map_;
  std::unique_ptr<DirectWriter> out_;  // this rank's writes (made at the first)
  struct Tally {                       // what this rank wrote
    std::vector<int64_t> sums;         // per dataset: its part of the checksum
    size_t bytes = 0, pieces = 0;
  } tally_;
  Phases phases_;
  std::string error_;  // this rank's first failed write
  bool finished_ = false;
};

// checkpoint.async: write_local on a thread of its own, started at construction, over a copy of the
// state taken before (the staging). done() polls; the destructor waits.
class BackgroundCheckpoint {
 public:
  // clock: the seconds the times below are on (the tracer's; read from the writing thread too).
  BackgroundCheckpoint(std::unique_ptr<H5CheckpointWriter> writer, std::vector<ParamStore::Owned> staged,
                       int64_t step, std::function<double()> clock);
  ~BackgroundCheckpoint();
  BackgroundCheckpoint(const BackgroundCheckpoint&) = delete;
  BackgroundCheckpoint& operator=(const BackgroundCheckpoint&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  void join();
  // After join: the staging buffers, for the next checkpoint to copy into (no new pages touched).
  std::vector<ParamStore::Owned> release_staging();
  H5CheckpointWriter& writer() { return *writer_; }
  int64_t step() const { return step_; }
  double started() const { return started_; }    // when the thread started (clock)
  double finished() const { return finished_; }  // when it ended: valid after join()

 private:
  std::unique_ptr<H5CheckpointWriter> writer_;
  std::vector<ParamStore::Owned> staged_;
  int64_t step_;
  std::function<double()> clock_;
  double started_, finished_ = 0;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace gpt2
