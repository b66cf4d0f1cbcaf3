#include "parallel/checkpoint_writer.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "model/checkpoint_h5.hpp"

namespace gpt2 {

namespace {
struct Writer {
  const std::string& path;
  hid_t file = -1;

  void check(herr_t r, const std::string& what) const {
    if (r < 0) fail_write(path, "HDF5 ", what, " failed");
  }
  void text(hid_t obj, const char* name, const std::string& value) const {
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, value.empty() ? 1 : value.size());
    const hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    check(H5Awrite(a, t, value.empty() ? "" : value.c_str()), std::string("write of the attribute ") + name);
    H5Aclose(a), H5Sclose(s), H5Tclose(t);
  }
  template <class T>
  void numbers(hid_t obj, const char* name, hid_t type, const std::vector<T>& v) const {
    const hsize_t n = v.size();
    const hid_t s = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    const hid_t a = H5Acreate2(obj, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
    check(H5Awrite(a, type, v.data()), std::string("write of the attribute ") + name);
    H5Aclose(a), H5Sclose(s);
  }
  void integer(hid_t obj, const char* name, int64_t v) const { numbers<int64_t>(obj, name, H5T_NATIVE_INT64, {v}); }
};
}  // namespace

void write_h5_checkpoint(const std::string& path, Communicator& world, const CheckpointMeta& meta,
                         const StageLayout& layout, bool replica_0, const std::vector<std::string>& sections,
                         const std::function<ParamStore::Owned(const std::string&)>& owned) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Writer w{path};
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, world.mpi_comm(), MPI_INFO_NULL);
  w.file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (w.file < 0) fail_write(path, "cannot create the HDF5 checkpoint");
  const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  try {
    // The root's attributes: collective metadata, the same values on every rank.
    w.text(w.file, "format", "gpt2-kokkos checkpoint");
    w.integer(w.file, "format_version", kH5CheckpointVersion);
    w.integer(w.file, "step", meta.step);
    w.integer(w.file, "updates", meta.updates);
    w.numbers<uint64_t>(w.file, "rng", H5T_NATIVE_UINT64, {meta.rng.begin(), meta.rng.end()});
    w.numbers<double>(w.file, "loss_scale", H5T_NATIVE_DOUBLE, {meta.loss_scale});
    w.integer(w.file, "loss_scale_clean", meta.loss_scale_clean);
    w.text(w.file, "optimizer", meta.optimizer);
    w.text(w.file, "config", meta.config_toml);
    w.integer(w.file, "n_layer", meta.model.n_layer);
    w.integer(w.file, "n_head", meta.model.n_head);
    w.integer(w.file, "n_embd", meta.model.n_embd);
    w.integer(w.file, "vocab_size", meta.model.vocab_size);
    w.integer(w.file, "block_size", meta.model.block_size);

    // The local tensors this rank may write, by name.
    std::map<std::string, const TensorInfo*> local;
    for (const TensorInfo& t : layout.tensors()) {
      if (t.range.begin < layout.tied_size()) continue;      // the tied copy of wte: stage 0 writes wte
      if (t.replicated && layout.tp().rank != 0) continue;  // tp rank 0 writes those
      local[t.name()] = &t;
    }
    const std::vector<TensorInfo> global = ParamLayout(meta.model).tensors();
    std::vector<float> buffer;  // one dataset's values, in the file's order
    for (const std::string& section : sections) {
      const ParamStore::Owned mine = owned(section);
      const bool writes = mine.sharded || replica_0;
      const hid_t g = H5Gcreate2(w.file, section.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (g < 0) fail_write(path, "cannot create the group ", section);
      for (const TensorInfo& t : global) {  // every rank, in one order: the writes are collective
        std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
        const hid_t fs = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
        const hid_t ds = H5Dcreate2(g, t.name().c_str(), H5T_NATIVE_FLOAT, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (ds < 0) fail_write(path, "cannot create the dataset ", section, "/", t.name());
        H5Sselect_none(fs);
        buffer.clear();
        uint64_t sum = 0;
        const auto it = local.find(t.name());
        if (writes && it != local.end()) {
          // The parts of the local tensor this rank holds (its ranges, in local order), each mapped
          // through the tensor's GlobalMap (count runs of len, stride apart) to flat ranges of the
          // global tensor: increasing, so the selection's order is the buffer's.
          const TensorInfo& part = *it->second;
          const GlobalMap& gm = part.global;
          size_t held = 0;  // where the range starts in mine.values
          for (const Range& r : mine.ranges) {
            const size_t lo = std::max(r.begin, part.range.begin), hi = std::min(r.end, part.range.end);
            for (size_t i = lo; i < hi;) {  // local element index i - part.range.begin
              const size_t e = i - part.range.begin, run = e / gm.len, in_run = e % gm.len;
              const size_t n = std::min(gm.len - in_run, hi - i);
              const size_t at = gm.begin + run * gm.stride + in_run - t.range.begin;  // in the global tensor
              select_flat(fs, tensor_cols(t), at, at + n);
              for (size_t k = 0; k < n; ++k) {
                const float v = mine.values[held + (i - r.begin) + k];
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                sum = (sum + element_checksum(at + k, bits)) & kChecksumMask;
                buffer.push_back(v);
              }
              i += n;
            }
            held += r.size();
          }
        }
        hsize_t n = buffer.size();
        const hid_t ms = H5Screate_simple(1, &n, nullptr);
        if (n == 0) H5Sselect_none(ms);
        const float none = 0;
        w.check(H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, buffer.empty() ? &none : buffer.data()),
                "write of " + section + "/" + t.name());
        // Sums below 2^48 from each rank: their total stays exact in 64 bits.
        const uint64_t total = uint64_t(world.host_sum(int64_t(sum))) & kChecksumMask;
        w.numbers<uint64_t>(ds, "checksum", H5T_NATIVE_UINT64, {total});
        H5Sclose(ms), H5Dclose(ds), H5Sclose(fs);
      }
      H5Gclose(g);
    }
  } catch (...) {
    H5Pclose(dxpl);
    throw;  // (the file stays open: the caller stops the job; HDF5 closes nothing at exit)
  }
  H5Pclose(dxpl);
  if (H5Fclose(w.file) < 0) fail_write(path, "HDF5 close failed");
}

}  // namespace gpt2
