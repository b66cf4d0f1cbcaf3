#include "parallel/checkpoint_writer.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "model/checkpoint_h5.hpp"
#include "model/hdf5_attributes.hpp"
#include "runtime/collective.hpp"

namespace gpt2 {

namespace {
void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) fail_write(path, "HDF5 ", what, " failed", hdf5_error_reason());
}

// MPI-IO's reason, without its error stack: "Other I/O error , error stack:\nADIOI_...(80): Other I/O
// error No space left on device" -> "No space left on device".
std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  std::string s(text, size_t(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  s = s.substr(s.rfind('\n') == std::string::npos ? 0 : s.rfind('\n') + 1);
  if (s.find("): ") != std::string::npos) s = s.substr(s.find("): ") + 3);
  const std::string generic = "Other I/O error ";
  if (s.compare(0, generic.size(), generic) == 0 && s.size() > generic.size()) s = s.substr(generic.size());
  return s;
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

}  // namespace

H5CheckpointWriter::H5CheckpointWriter(const std::string& path, const std::string& tmp, MPI_Comm world,
                                       const CheckpointMeta& meta, const StageLayout& layout, bool replica_0,
                                       const std::vector<std::string>& sections, size_t round_floats)
    : path_(path), tmp_(tmp), world_(world), round_floats_(round_floats), replica_0_(replica_0), sections_(sections), global_(ParamLayout(meta.model).tensors()) {
  MPI_Comm_rank(world, &rank_);
  // The local tensors this rank may write, by global index.
  local_.assign(global_.size(), nullptr);
  for (const TensorInfo& t : layout.tensors()) {
    if (t.range.begin < layout.tied_size()) continue;      // the tied copy of wte: stage 0 writes wte
    if (t.replicated && layout.tp().rank != 0) continue;  // tp rank 0 writes those
    for (size_t i = 0; i < global_.size(); ++i)
      if (global_[i].name() == t.name()) local_[i] = &t;
  }
  for (const TensorInfo& t : global_) {
    size_t n = 1;
    for (size_t d : stored_shape(t, meta.model)) n *= d;
    stored_.push_back(n);
  }
  sums_.assign(sections.size() * global_.size(), 0);
  try {
    create(meta);
  } catch (...) {
    if (rank_ == 0) std::remove(tmp.c_str());
    throw;
  }
}

void H5CheckpointWriter::create(const CheckpointMeta& meta) {
  const std::string& path = path_;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, world_, MPI_INFO_NULL);
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
      for (const TensorInfo& t : global_) {
        const std::vector<size_t> shape = stored_shape(t, meta.model);
        std::vector<hsize_t> dims(shape.begin(), shape.end());
        const hid_t fs = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
        const hid_t ds = H5Dcreate2(g, t.name().c_str(), H5T_IEEE_F32LE, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Sclose(fs);
        if (ds < 0) fail_write(path, "cannot create the dataset ", section, "/", t.name(), hdf5_error_reason());
        const haddr_t at = H5Dget_offset(ds);
        H5Dclose(ds);
        if (at == HADDR_UNDEF) fail_write(path, "the dataset ", section, "/", t.name(), " has no place in the file");
        offsets_.push_back(uint64_t(at));
      }
      H5Gclose(g);
    }
  } catch (...) {
    H5Pclose(dcpl);
    throw;  // (the file stays open: the caller stops the job; HDF5 closes nothing at exit)
  }
  H5Pclose(dcpl);
  if (H5Fclose(file) < 0) fail_write(path, "HDF5 close failed", hdf5_error_reason());
}

// The parts of each local tensor this rank holds (its ranges, in local order), each mapped through
// the tensor's GlobalMap (count runs of len, stride apart) to flat ranges of the global tensor, which
// is a contiguous row-major dataset: a flat range is a run of bytes in the file.
std::vector<H5CheckpointWriter::Piece> H5CheckpointWriter::pieces(size_t section, const ParamStore::Owned& mine) const {
  std::vector<Piece> out;
  if (!mine.sharded && !replica_0_) return out;  // another dp replica writes whole state
  for (size_t ti = 0; ti < global_.size(); ++ti) {
    const TensorInfo* part = local_[ti];
    if (!part) continue;
    const GlobalMap& gm = part->global;
    const size_t dataset = section * global_.size() + ti;
    size_t held = 0;  // where the range starts in mine.values
    for (const Range& r : mine.ranges) {
      const size_t lo = std::max(r.begin, part->range.begin), hi = std::min(r.end, part->range.end);
      for (size_t i = lo; i < hi;) {  // local element index i - part->range.begin
        const size_t e = i - part->range.begin, run = e / gm.len, in_run = e % gm.len;
        const size_t value = held + (i - r.begin);
        const size_t round_end = (value / round_floats_ + 1) * round_floats_;
        const size_t n = std::min({gm.len - in_run, hi - i, round_end - value});
        const uint64_t element = gm.begin + run * gm.stride + in_run - global_[ti].range.begin;
        i += n;
        if (element >= stored_[ti]) continue;  // wte's padded rows (zero) are not stored
        Piece p{offsets_[dataset] + element * 4, value, std::min<size_t>(n, stored_[ti] - element), dataset, element};
        Piece* last = out.empty() ? nullptr : &out.back();
        if (last && last->dataset == dataset && last->offset + last->count * 4 == p.offset &&
            last->value + last->count == value && value % round_floats_ != 0)
          last->count += p.count;
        else
          out.push_back(p);
      }
      held += r.size();
    }
  }
  // By round, then by place in the file (as an MPI-IO file view wants them).
  std::sort(out.begin(), out.end(), [this](const Piece& a, const Piece& b) {
    const size_t ra = a.value / round_floats_, rb = b.value / round_floats_;
    return ra != rb ? ra < rb : a.offset < b.offset;
  });
  return out;
}

void H5CheckpointWriter::add_checksums(const Piece* ps, size_t count, const float* values, size_t first) {
  for (const Piece* q = ps; q != ps + count; ++q) {
    const Piece& p = *q;
    uint64_t sum = uint64_t(sums_[p.dataset]);
    for (size_t k = 0; k < p.count; ++k) {
      uint32_t bits;
      std::memcpy(&bits, values + (p.value - first) + k, 4);
      sum = (sum + element_checksum(p.element + k, bits)) & kChecksumMask;
    }
    sums_[p.dataset] = int64_t(sum);
    bytes_ += p.count * 4;
  }
}

void H5CheckpointWriter::write_collective(const std::string& section, const ParamStore::Owned& mine,
                                          const Fetch& fetch) {
  const size_t si = size_t(std::find(sections_.begin(), sections_.end(), section) - sections_.begin());
  if (si == sections_.size()) fail("H5CheckpointWriter: unknown section ", section);
  const std::vector<Piece> ps = pieces(si, mine);
  // As many rounds on every rank (collective): the most values any rank writes.
  const size_t held = ps.empty() ? 0 : mine.size();
  int rounds = int((held + round_floats_ - 1) / round_floats_);
  MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_INT, MPI_MAX, world_);
  MPI_File fh;
  int rc = MPI_File_open(world_, tmp_.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
  if (rc != MPI_SUCCESS) {
    if (error_.empty()) error_ = "MPI-IO open for writing " + section + " failed: " + mpi_error(rc);
    return;  // (collective: every rank's open failed alike)
  }
  std::vector<float> buffer;
  size_t a = 0;  // the round's first piece
  for (int round = 0; round < rounds; ++round) {
    const size_t first = size_t(round) * round_floats_, count = std::min(round_floats_, held - std::min(held, first));
    size_t b = a;
    while (b < ps.size() && ps[b].value < first + count) ++b;
    const int n = int(b - a);
    MPI_Datatype file_type = MPI_FLOAT, mem_type = MPI_FLOAT;
    if (n > 0) {
      buffer.resize(count);
      fetch(first, count, buffer.data());
      add_checksums(ps.data() + a, size_t(n), buffer.data(), first);
      std::vector<int> lengths(static_cast<size_t>(n));
      std::vector<MPI_Aint> at_file(static_cast<size_t>(n)), at_mem(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) {
        const Piece& p = ps[a + size_t(k)];
        lengths[size_t(k)] = int(p.count);
        at_file[size_t(k)] = MPI_Aint(p.offset);
        at_mem[size_t(k)] = MPI_Aint((p.value - first) * 4);
      }
      MPI_Type_create_hindexed(n, lengths.data(), at_file.data(), MPI_FLOAT, &file_type);
      MPI_Type_create_hindexed(n, lengths.data(), at_mem.data(), MPI_FLOAT, &mem_type);
      MPI_Type_commit(&file_type);
      MPI_Type_commit(&mem_type);
    }
    rc = MPI_File_set_view(fh, 0, MPI_FLOAT, file_type, "native", MPI_INFO_NULL);
    MPI_Status status;
    if (rc == MPI_SUCCESS) rc = MPI_File_write_all(fh, buffer.data(), n > 0 ? 1 : 0, mem_type, &status);
    if (rc != MPI_SUCCESS && error_.empty()) error_ = "MPI-IO write of " + section + " failed: " + mpi_error(rc);
    if (n > 0) MPI_Type_free(&file_type), MPI_Type_free(&mem_type);
    a = b;
  }
  rc = MPI_File_sync(fh);
  if (rc != MPI_SUCCESS && error_.empty()) error_ = "MPI-IO sync of " + section + " failed: " + mpi_error(rc);
  rc = MPI_File_close(&fh);
  if (rc != MPI_SUCCESS && error_.empty()) error_ = "MPI-IO close after " + section + " failed: " + mpi_error(rc);
}

void H5CheckpointWriter::write_local(const std::vector<ParamStore::Owned>& staged) {
  const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = std::string("cannot open it for writing: ") + std::strerror(errno);
    return;
  }
  for (size_t si = 0; si < staged.size() && error_.empty(); ++si) {
    const std::vector<Piece> ps = pieces(si, staged[si]);
    add_checksums(ps.data(), ps.size(), staged[si].values.data(), 0);
    for (const Piece& p : ps) {
      const char* src = reinterpret_cast<const char*>(staged[si].values.data() + p.value);
      size_t left = p.count * 4;
      off_t at = off_t(p.offset);
      while (left > 0) {
        const ssize_t w = ::pwrite(fd, src, left, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          error_ = "write of " + sections_[si] + " failed: " + (w < 0 ? std::strerror(errno) : "no progress");
          break;
        }
        src += w, left -= size_t(w), at += w;
      }
      if (!error_.empty()) break;
    }
  }
  if (error_.empty() && ::fdatasync(fd) != 0) error_ = std::string("fdatasync failed: ") + std::strerror(errno);
  ::close(fd);
}

void H5CheckpointWriter::finish() {
  collective_phase(world_, [&] {
    if (!error_.empty()) fail_write(path_, error_);
  });
  MPI_Allreduce(MPI_IN_PLACE, sums_.data(), int(sums_.size()), MPI_INT64_T, MPI_SUM, world_);
  // (each rank's part is below 2^48: the totals stay exact in 64 bits)
  collective_phase(world_, [&] {
    if (rank_ != 0) return;
    const hid_t file = H5Fopen(tmp_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0) fail_write(path_, "cannot open it to write the checksums", hdf5_error_reason());
    bool ok = true;
    for (size_t si = 0; si < sections_.size() && ok; ++si)
      for (size_t ti = 0; ti < global_.size() && ok; ++ti) {
        const std::string name = sections_[si] + "/" + global_[ti].name();
        const hid_t ds = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
        ok = ds >= 0 && h5_attr_uints(ds, "checksum", {uint64_t(sums_[si * global_.size() + ti]) & kChecksumMask});
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
