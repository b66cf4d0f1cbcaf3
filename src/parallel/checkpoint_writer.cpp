#include "parallel/checkpoint_writer.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "formats/checkpoint_h5.hpp"
#include "hdf5/hdf5_attributes.hpp"
#include "runtime/collective.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

namespace {
int comm_size(MPI_Comm c) {
  int n = 1;
  MPI_Comm_size(c, &n);
  return n;
}

void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) fail_write(path, "HDF5 ", what, " failed", hdf5_error_reason());
}

// The root's attributes: collective metadata, the same values on every rank.
bool write_run_attributes(hid_t file, const CheckpointMeta& meta) {
  return h5_attr_text(file, "format", "gpt2-kokkos checkpoint") &&
         h5_attr_int(file, "format_version", kH5CheckpointVersion) && h5_attr_int(file, "step", meta.step) &&
         h5_attr_int(file, "updates", meta.updates) && h5_attr_uints(file, "rng", {meta.rng.begin(), meta.rng.end()}) &&
         h5_attr_double(file, "loss_scale", meta.loss_scale) &&
         h5_attr_int(file, "loss_scale_clean", meta.loss_scale_clean) && h5_attr_text(file, "optimizer", meta.optimizer) &&
         h5_attr_text(file, "config", meta.config_toml) && h5_attr_int(file, "n_layer", meta.model.n_layer) &&
         h5_attr_int(file, "n_head", meta.model.n_head) && h5_attr_int(file, "n_embd", meta.model.n_embd) &&
         h5_attr_int(file, "vocab_size", meta.model.vocab_size) && h5_attr_int(file, "block_size", meta.model.block_size);
}

// Room for the whole file before HDF5 touches it: the file made at its full size (a file-size limit
// fails here) with its blocks reserved where the file system can (a full disk fails here). HDF5 then
// never holds a file it cannot finish -- its close extends the file to its end, and a failure there
// leaves it a file it can neither close nor forget -- and a full disk is found before any data moves.
void reserve(const std::string& path, const std::string& tmp, uint64_t bytes) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(path, "cannot create it: ", std::strerror(errno));
  int failed = ::ftruncate(fd, off_t(bytes)) == 0 ? 0 : errno;
  if (!failed && ::fallocate(fd, 0, 0, off_t(bytes)) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) failed = errno;
  ::close(fd);
  if (failed) fail_write(path, "cannot reserve ", bytes, " bytes for it: ", std::strerror(failed));
}

// An upper bound of the file's size: the metadata block, and each dataset from a block boundary.
uint64_t file_bound(const std::vector<size_t>& stored, size_t sections) {
  uint64_t data = 0;
  for (size_t n : stored) data += (uint64_t(n) * 4 + DirectWriter::kBlock - 1) / DirectWriter::kBlock * DirectWriter::kBlock;
  return (uint64_t(2) << 20) + data * sections + stored.size() * sections * DirectWriter::kBlock;
}

// run_checksum over the host's threads, in blocks (the synchronous path: its threads are idle; the
// background writer's thread must not start Kokkos work beside the step's).
uint64_t checksum_on_host_threads(const float* values, uint64_t first, size_t n) {
  constexpr size_t kBlock = size_t(1) << 14;
  uint64_t sum = 0;
  Kokkos::parallel_reduce(
      "checkpoint_checksum", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, (n + kBlock - 1) / kBlock),
      [=](size_t b, uint64_t& acc) {
        const size_t at = b * kBlock;
        acc += run_checksum(values + at, first + at, std::min(kBlock, n - at));
      },
      sum);
  return sum & kChecksumMask;
}

}  // namespace

H5CheckpointWriter::H5CheckpointWriter(const std::string& path, const std::string& tmp, MPI_Comm world,
                                       const CheckpointMeta& meta, const StageLayout& layout, bool replica_0,
                                       const std::vector<std::string>& sections, MPI_Comm tp, size_t buffer_bytes)
    : path_(path),
      tmp_(tmp),
      world_(world),
      tp_(tp),
      tp_size_(comm_size(tp)),
      buffer_bytes_(buffer_bytes),
      sections_(sections),
      map_(meta.model, layout, replica_0, tp_size_) {
  MPI_Comm_rank(world, &rank_);
  tally_.sums.assign(map_.datasets(sections.size()), 0);
  const double t0 = MPI_Wtime();
  std::vector<uint64_t> offsets;
  try {
    collective_phase(world_, [&] {
      if (rank_ != 0) return;
      reserve(path_, tmp_, file_bound(map_.stored(), sections_.size()));
      offsets = create(meta);
    });
  } catch (...) {
    if (rank_ == 0) std::remove(tmp.c_str());
    throw;
  }
  offsets.resize(map_.datasets(sections.size()));
  MPI_Bcast(offsets.data(), int(offsets.size()), MPI_UINT64_T, 0, world_);
  map_.set_offsets(std::move(offsets));
  phases_.create = MPI_Wtime() - t0;
}

std::vector<uint64_t> H5CheckpointWriter::create(const CheckpointMeta& meta) {
  const std::string& path = path_;
  std::vector<uint64_t> offsets;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  // The metadata in one block at the start of the file, every dataset of a block or more starting on
  // a block (the O_DIRECT writes cover whole blocks), and MPI-IO on this rank alone: closing writes
  // only that first block and leaves the file's size to the data writes (the POSIX driver extends the
  // file at close; on a full disk that fails, and HDF5 keeps a file it can neither close nor forget).
  H5Pset_fapl_mpio(fapl, MPI_COMM_SELF, MPI_INFO_NULL);
  H5Pset_meta_block_size(fapl, hsize_t(1) << 20);
  H5Pset_alignment(fapl, DirectWriter::kBlock, DirectWriter::kBlock);
  const hid_t file = H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) fail_write(path, "cannot create the HDF5 checkpoint", hdf5_error_reason());
  // Contiguous, allocated now, never filled: the data is written once, by its owners, at known offsets.
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  try {
    check(write_run_attributes(file, meta), path, "write of the checkpoint's attributes");
    for (const std::string& section : sections_) {
      const hid_t g = H5Gcreate2(file, section.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (g < 0) fail_write(path, "cannot create the group ", section, hdf5_error_reason());
      for (const TensorInfo& t : map_.tensors()) {
        const std::vector<size_t> shape = stored_shape(t, meta.model);
        std::vector<hsize_t> dims(shape.begin(), shape.end());
        const hid_t fs = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
        const hid_t ds = H5Dcreate2(g, t.name().c_str(), H5T_IEEE_F32LE, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Sclose(fs);
        if (ds < 0) fail_write(path, "cannot create the dataset ", section, "/", t.name(), hdf5_error_reason());
        const haddr_t at = H5Dget_offset(ds);
        H5Dclose(ds);
        if (at == HADDR_UNDEF) fail_write(path, "the dataset ", section, "/", t.name(), " has no place in the file");
        offsets.push_back(uint64_t(at));
      }
      H5Gclose(g);
    }
  } catch (...) {
    H5Pclose(dcpl);
    throw;  // (the file stays open: the caller stops the job; HDF5 closes nothing at exit)
  }
  H5Pclose(dcpl);
  if (H5Fclose(file) < 0) fail_write(path, "HDF5 close failed", hdf5_error_reason());
  return offsets;
}

H5CheckpointWriter::Joined H5CheckpointWriter::join_tp(size_t section, const ParamStore::Owned& mine,
                                                      const Fetch& fetch) {
  Joined j;
  if (tp_size_ == 1) return j;
  const double t0 = MPI_Wtime();
  // To each tensor's joiner: per piece (offset, element, count, dataset), and the values.
  std::vector<std::vector<uint64_t>> heads(static_cast<size_t>(tp_size_));
  std::vector<std::vector<float>> values(static_cast<size_t>(tp_size_));
  const size_t chunk = std::max<size_t>(1, buffer_bytes_ / 4);  // fetch's bound
  // A slice's runs lie one after another in what the rank holds: fetched as one span (a fetch per
  // run of a few KB would cost more than the copy).
  size_t span_from = 0, span_n = 0, span_to = 0;
  auto fetch_span = [&] {
    float* dst = values[span_to].data() + values[span_to].size() - span_n;
    for (size_t d = 0; d < span_n; d += chunk) fetch(span_from + d, std::min(chunk, span_n - d), dst + d);
    span_n = 0;
  };
  for (const Piece& p : map_.pieces(section, mine, /*joinable=*/true)) {
    const size_t to = size_t(map_.joiner(p.dataset));
    if (span_n && (to != span_to || p.value != span_from + span_n)) fetch_span();
    if (!span_n) span_from = p.value, span_to = to;
    span_n += p.count;
    heads[to].insert(heads[to].end(), {p.offset, p.element, uint64_t(p.count), uint64_t(p.dataset)});
    values[to].resize(values[to].size() + p.count);
  }
  if (span_n) fetch_span();
  const std::vector<uint64_t> head = all_to_all(tp_, heads, MPI_UINT64_T);
  const std::vector<float> got = all_to_all(tp_, values, MPI_FLOAT);
  // The group's slices of this rank's tensors, in the file's order: adjacent ones make whole rows.
  std::vector<Piece> in;
  size_t value = 0;  // where each piece's values start in `got`
  for (size_t h = 0; h + 4 <= head.size(); h += 4) {
    in.push_back({head[h], value, size_t(head[h + 2]), size_t(head[h + 3]), head[h + 1]});
    value += size_t(head[h + 2]);
  }
  sort_by_offset(in);
  j.values.resize(got.size());
  size_t at = 0;
  for (const Piece& p : in) {
    std::copy(got.begin() + long(p.value), got.begin() + long(p.value + p.count), j.values.begin() + long(at));
    Piece* last = j.pieces.empty() ? nullptr : &j.pieces.back();
    if (last && last->dataset == p.dataset && last->offset + last->count * 4 == p.offset)
      last->count += p.count;
    else
      j.pieces.push_back({p.offset, at, p.count, p.dataset, p.element});
    at += p.count;
  }
  for (Piece& p : j.pieces) p.joined = j.values.data() + p.value;
  phases_.fill += MPI_Wtime() - t0;
  return j;
}

void H5CheckpointWriter::write_pieces(const std::vector<Piece>& ps, const Fetch& fetch, bool host_threads) {
  if (!out_) out_ = std::make_unique<DirectWriter>(tmp_, buffer_bytes_);
  tally_.pieces += ps.size();
  for (const Piece& p : ps) {
    uint64_t sum = uint64_t(tally_.sums[p.dataset]);
    out_->write(p.offset, p.count * 4, [&](char* dst, size_t from, size_t n) {
      const double t0 = MPI_Wtime();
      float* values = reinterpret_cast<float*>(dst);
      if (p.joined)
        std::memcpy(values, p.joined + from / 4, n);
      else
        fetch(p.value + from / 4, n / 4, values);
      sum += host_threads ? checksum_on_host_threads(values, p.element + from / 4, n / 4)
                          : run_checksum(values, p.element + from / 4, n / 4);  // (while the values are in cache)
      phases_.fill += MPI_Wtime() - t0;
    });
    tally_.sums[p.dataset] = int64_t(sum & kChecksumMask);
    tally_.bytes += p.count * 4;
  }
}

void H5CheckpointWriter::flush() {
  if (!out_) return;
  const double t0 = MPI_Wtime();
  if (error_.empty()) error_ = out_->finish();
  out_.reset();
  phases_.disk += MPI_Wtime() - t0;
}

void H5CheckpointWriter::write_section(const std::string& section, const ParamStore::Owned& mine, const Fetch& fetch) {
  const size_t si = size_t(std::find(sections_.begin(), sections_.end(), section) - sections_.begin());
  if (si == sections_.size()) fail("H5CheckpointWriter: unknown section ", section);
  const double t0 = MPI_Wtime(), fill0 = phases_.fill;
  const Joined joined = join_tp(si, mine, fetch);
  std::vector<Piece> ps = map_.pieces(si, mine);
  ps.insert(ps.end(), joined.pieces.begin(), joined.pieces.end());
  sort_by_offset(ps);
  write_pieces(ps, fetch, /*host_threads=*/true);
  phases_.disk += MPI_Wtime() - t0 - (phases_.fill - fill0);  // (waits for a free buffer)
}

void H5CheckpointWriter::write_local(const std::vector<ParamStore::Owned>& staged) {
  if (tp_size_ > 1) fail("H5CheckpointWriter::write_local: a writer that joins tp slices writes with write_section");
  const double t0 = MPI_Wtime();
  for (size_t si = 0; si < staged.size(); ++si) {
    const std::vector<float>& values = staged[si].values;
    write_pieces(map_.pieces(si, staged[si]),
                 [&](size_t begin, size_t n, float* dst) { std::memcpy(dst, values.data() + begin, n * 4); },
                 /*host_threads=*/false);
  }
  phases_.disk += MPI_Wtime() - t0 - phases_.fill;
  flush();
}

void H5CheckpointWriter::finish() {
  flush();  // (the synchronous path's; write_local's already happened on its thread)
  const double t0 = MPI_Wtime();
  struct Count {  // the finish phase's time, however it ends
    double t0;
    double& into;
    ~Count() { into += MPI_Wtime() - t0; }
  } count{t0, phases_.finish};
  collective_phase(world_, [&] {
    if (!error_.empty()) fail_write(path_, error_);
  });
  MPI_Request r;  // (polled: ranks end their writes at different times)
  MPI_Iallreduce(MPI_IN_PLACE, tally_.sums.data(), int(tally_.sums.size()), MPI_INT64_T, MPI_SUM, world_, &r);
  mpi_wait(r, "the checkpoint's checksum sums");
  // (each rank's part is below 2^48: the totals stay exact in 64 bits)
  collective_phase(world_, [&] {
    if (rank_ != 0) return;
    const hid_t file = H5Fopen(tmp_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0) fail_write(path_, "cannot open it to write the checksums", hdf5_error_reason());
    bool ok = true;
    const std::vector<TensorInfo>& tensors = map_.tensors();
    for (size_t si = 0; si < sections_.size() && ok; ++si)
      for (size_t ti = 0; ti < tensors.size() && ok; ++ti) {
        const std::string name = sections_[si] + "/" + tensors[ti].name();
        const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
        ok = ds >= 0 && h5_attr_uints(ds, "checksum", {uint64_t(tally_.sums[si * tensors.size() + ti]) & kChecksumMask});
        if (ds >= 0) H5Dclose(ds);
        if (!ok) fail_write(path_, "HDF5 write of ", name, "'s checksum failed", hdf5_error_reason());
      }
    if (H5Fclose(file) < 0) fail_write(path_, "HDF5 close failed", hdf5_error_reason());
    const int fd = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      fail_write(path_, "fsync failed: ", std::strerror(e));
    }
    ::close(fd);
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail_write(path_, "rename failed: ", std::strerror(errno));
  });
  finished_ = true;
}

H5CheckpointWriter::~H5CheckpointWriter() {
  if (!finished_ && rank_ == 0) std::remove(tmp_.c_str());
}

BackgroundCheckpoint::BackgroundCheckpoint(std::unique_ptr<H5CheckpointWriter> writer,
                                           std::vector<ParamStore::Owned> staged, int64_t step,
                                           std::function<double()> clock)
    : writer_(std::move(writer)), staged_(std::move(staged)), step_(step), clock_(std::move(clock)), started_(clock_()) {
  thread_ = std::thread([this] {
    // Behind the compute threads when they want the cores (Linux: a thread's own nice value).
    ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), 10);
    writer_->write_local(staged_);
    finished_ = clock_();
    done_.store(true, std::memory_order_release);
  });
}

void BackgroundCheckpoint::join() {
  if (thread_.joinable()) thread_.join();
}

std::vector<ParamStore::Owned> BackgroundCheckpoint::release_staging() {
  join();
  return std::move(staged_);
}

BackgroundCheckpoint::~BackgroundCheckpoint() { join(); }

}  // namespace gpt2
