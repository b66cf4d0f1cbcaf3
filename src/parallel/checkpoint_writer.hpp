#pragma once
// Writes an HDF5 checkpoint (model/checkpoint_h5.hpp) with every rank writing its own part; nothing
// is gathered. Three steps:
//   1. create (collective): the file with the run's attributes and every dataset allocated at its
//      global shape, contiguous and unfilled -- metadata only; each dataset's offset in the file is
//      then known, and the data goes in as raw little-endian floats at those offsets;
//   2. write each section: what the rank holds of it (ParamStore::owned_values: its ZeRO pieces of
//      sharded state, the whole local state where dp replica 0 writes it -- tp rank 0 for
//      tp-replicated tensors, stage 0 for wte), mapped through each tensor's GlobalMap to pieces of
//      the file. Either with one collective MPI-IO write per section (the synchronous path: MPI-IO
//      aggregates tensor parallelism's strided rows into large writes), or with plain pwrite from a
//      background thread (checkpoint.async: no MPI or HDF5 call off the main thread);
//   3. finish (collective): the ranks agree that every write succeeded (else every rank throws, one
//      message naming the file and the reason), sum each dataset's checksum over the ranks, rank 0
//      writes them as attributes and gives the file its name.
// The file is written under a temporary name until then; a writer that does not finish removes it.
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/stage_layout.hpp"
#include "parallel/param_store.hpp"

namespace gpt2 {

class H5CheckpointWriter {
 public:
  // The synchronous path writes a section in rounds of at most this many of the rank's values (64
  // MiB), one buffer at a time: no rank holds more than its state and that buffer. Pieces do not
  // cross a round's bounds (so MPI's int counts hold too).
  static constexpr size_t kRoundFloats = size_t(1) << 24;

  // Collective over world: creates `tmp`, which finish() renames to `path`. replica_0: this rank is in
  // dp replica 0 (writes unsharded state). WriteError naming `path` when it cannot be created.
  H5CheckpointWriter(const std::string& path, const std::string& tmp, MPI_Comm world, const CheckpointMeta& meta,
                     const StageLayout& layout, bool replica_0, const std::vector<std::string>& sections,
                     size_t round_floats = kRoundFloats);
  ~H5CheckpointWriter();  // rank 0 removes the temporary unless finish() succeeded
  H5CheckpointWriter(const H5CheckpointWriter&) = delete;
  H5CheckpointWriter& operator=(const H5CheckpointWriter&) = delete;

  // Collective: this rank's part of `section` with collective MPI-IO, in rounds of a bounded buffer
  // that fetch(begin, n, dst) fills with values [begin, begin + n) of what the rank holds (`mine`:
  // its ranges, ParamStore::owned_ranges). A failure is kept for finish().
  using Fetch = std::function<void(size_t begin, size_t n, float* dst)>;
  void write_collective(const std::string& section, const ParamStore::Owned& mine, const Fetch& fetch);
  // Local (any thread; no MPI, no HDF5): this rank's part of every section with pwrite, then
  // fdatasync. staged[i] is what the rank holds of sections[i].
  void write_local(const std::vector<ParamStore::Owned>& staged);
  // Collective: WriteError (CollectiveError) on every rank if any rank's write failed; else the
  // checksums go in and the file takes its name.
  void finish();

  const std::string& path() const { return path_; }
  size_t bytes_written() const { return bytes_; }  // by this rank

 private:
  struct Piece {       // a run of values that lies contiguous in the file
    uint64_t offset;   // bytes from the start of the file
    size_t value;      // index in the section's owned values
    size_t count;      // floats
    size_t dataset;    // index in datasets_ (section-major)
    uint64_t element;  // the first value's index in its tensor (for the checksum)
  };
  void create(const CheckpointMeta& meta);  // the file, its attributes and datasets (collective)
  std::vector<Piece> pieces(size_t section, const ParamStore::Owned& mine) const;
  // values[i] holds the value of index first + i (Piece::value counts from the section's start)
  void add_checksums(const Piece* ps, size_t count, const float* values, size_t first);

  std::string path_, tmp_;
  MPI_Comm world_;
  size_t round_floats_;
  int rank_ = 0;
  bool replica_0_;
  std::vector<std::string> sections_;
  std::vector<TensorInfo> global_;        // the global layout's tensors, in order
  std::vector<const TensorInfo*> local_;  // per global tensor: the local one this rank may write, or null
  std::vector<size_t> stored_;            // per global tensor: the elements the file stores
  std::vector<uint64_t> offsets_;         // per dataset (section-major): its data's offset in the file
  std::vector<int64_t> sums_;             // per dataset: this rank's part of its checksum
  std::string error_;                     // this rank's first failed write
  size_t bytes_ = 0;
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
