#include "parallel/checkpoint_writer.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.hpp"
#include "model/checkpoint_h5.hpp"
#include "model/hdf5_attributes.hpp"

namespace gpt2 {

namespace {
void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) fail_write(path, "HDF5 ", what, " failed", hdf5_error_reason());
}
}  // namespace

void write_h5_checkpoint(const std::string& path, Communicator& world, const CheckpointMeta& meta,
                         const StageLayout& layout, bool replica_0, const std::vector<std::string>& sections,
                         const std::function<ParamStore::Owned(const std::string&)>& owned) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, world.mpi_comm(), MPI_INFO_NULL);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) fail_write(path, "cannot create the HDF5 checkpoint", hdf5_error_reason());
  const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  try {
    // The root's attributes: collective metadata, the same values on every rank.
    const bool attrs = h5_attr_text(file, "format", "gpt2-kokkos checkpoint") &&
                       h5_attr_int(file, "format_version", kH5CheckpointVersion) && h5_attr_int(file, "step", meta.step) &&
                       h5_attr_int(file, "updates", meta.updates) &&
                       h5_attr_uints(file, "rng", {meta.rng.begin(), meta.rng.end()}) &&
                       h5_attr_double(file, "loss_scale", meta.loss_scale) &&
                       h5_attr_int(file, "loss_scale_clean", meta.loss_scale_clean) &&
                       h5_attr_text(file, "optimizer", meta.optimizer) && h5_attr_text(file, "config", meta.config_toml) &&
                       h5_attr_int(file, "n_layer", meta.model.n_layer) && h5_attr_int(file, "n_head", meta.model.n_head) &&
                       h5_attr_int(file, "n_embd", meta.model.n_embd) &&
                       h5_attr_int(file, "vocab_size", meta.model.vocab_size) &&
                       h5_attr_int(file, "block_size", meta.model.block_size);
    check(attrs, path, "write of the checkpoint's attributes");

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
      const hid_t g = H5Gcreate2(file, section.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      std::vector<int64_t> sums;  // this rank's part of each dataset's checksum
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
        check(H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, buffer.empty() ? &none : buffer.data()) >= 0, path,
              "write of " + section + "/" + t.name());
        sums.push_back(int64_t(sum));
        H5Sclose(ms), H5Dclose(ds), H5Sclose(fs);
      }
      // The section's checksums summed over the ranks at once (each rank's below 2^48: the totals
      // stay exact in 64 bits), then written by every rank alike (collective metadata).
      world.host_allreduce(sums.data(), sums.size(), DType::i64, ReduceOp::sum);
      for (size_t i = 0; i < global.size(); ++i) {
        const hid_t ds = H5Dopen2(g, global[i].name().c_str(), H5P_DEFAULT);
        check(h5_attr_uints(ds, "checksum", {uint64_t(sums[i]) & kChecksumMask}), path,
              "write of " + section + "/" + global[i].name() + "'s checksum");
        H5Dclose(ds);
      }
      H5Gclose(g);
    }
  } catch (...) {
    H5Pclose(dxpl);
    throw;  // (the file stays open: the caller stops the job; HDF5 closes nothing at exit)
  }
  H5Pclose(dxpl);
  if (H5Fclose(file) < 0) fail_write(path, "HDF5 close failed", hdf5_error_reason());
}

}  // namespace gpt2
