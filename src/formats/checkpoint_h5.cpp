#include "formats/checkpoint_h5.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "hdf5/hdf5_attributes.hpp"

namespace gpt2 {

void select_flat(int64_t space, size_t cols, size_t a, size_t b) {
  const bool flat = H5Sget_simple_extent_ndims(space) == 1;
  auto block = [&](size_t row, size_t col, size_t rows, size_t n) {
    if (flat) {
      const hsize_t start = row * cols + col, count = rows * n;
      H5Sselect_hyperslab(space, H5S_SELECT_OR, &start, nullptr, &count, nullptr);
    } else {
      const hsize_t start[2] = {row, col}, count[2] = {rows, n};
      H5Sselect_hyperslab(space, H5S_SELECT_OR, start, nullptr, count, nullptr);
    }
  };
  while (a < b) {
    const size_t row = a / cols, col = a % cols;
    if (col == 0 && b - a >= cols) {  // whole rows
      const size_t rows = (b - a) / cols;
      block(row, 0, rows, cols);
      a += rows * cols;
    } else {
      const size_t len = std::min(cols - col, b - a);
      block(row, col, 1, len);
      a += len;
    }
  }
}

bool is_h5_checkpoint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char sig[8] = {};
  const bool ok = std::fread(sig, 1, 8, f) == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
  std::fclose(f);
  return ok;
}

namespace {
template <class T>
std::vector<T> number_attribute(hid_t obj, const char* name, hid_t type, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) fail_input(path, "not a gpt2-kokkos checkpoint: no attribute ", name);
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT), s = H5Aget_space(a);
  std::vector<T> v(size_t(std::max<hssize_t>(H5Sget_simple_extent_npoints(s), 0)));
  const herr_t r = v.empty() ? -1 : H5Aread(a, type, v.data());
  H5Sclose(s), H5Aclose(a);
  if (r < 0) fail_input(path, "corrupt checkpoint: cannot read the attribute ", name);
  return v;
}

}  // namespace

H5CheckpointReader::H5CheckpointReader(const std::string& path) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail_input(path, "corrupt checkpoint: HDF5 cannot open it");
  try {
    if (hdf5_text_attribute(file_, "format") != "gpt2-kokkos checkpoint")
      fail_input(path, "an HDF5 file, but not a gpt2-kokkos checkpoint (no format attribute)");
    const int version = number_attribute<int64_t>(file_, "format_version", H5T_NATIVE_INT64, path)[0];
    if (version != kH5CheckpointVersion)
      fail_input(path, "checkpoint format version ", version, "; this build reads version ", kH5CheckpointVersion);
    auto integer = [&](const char* name) { return number_attribute<int64_t>(file_, name, H5T_NATIVE_INT64, path)[0]; };
    ModelConfig& m = meta_.model;
    m.n_layer = int(integer("n_layer")), m.n_head = int(integer("n_head")), m.n_embd = int(integer("n_embd"));
    m.vocab_size = int(integer("vocab_size")), m.block_size = int(integer("block_size"));
    try {
      m.validate();
    } catch (const InputError& e) {
      fail_input(path, "corrupt checkpoint: invalid model shape (", e.what(), ")");
    }
    meta_.step = integer("step");
    meta_.updates = integer("updates");
    const std::vector<uint64_t> rng = number_attribute<uint64_t>(file_, "rng", H5T_NATIVE_UINT64, path);
    if (rng.size() != 4) fail_input(path, "corrupt checkpoint: rng holds ", rng.size(), " values, not 4");
    std::copy(rng.begin(), rng.end(), meta_.rng.begin());
    meta_.loss_scale = number_attribute<double>(file_, "loss_scale", H5T_NATIVE_DOUBLE, path)[0];
    meta_.loss_scale_clean = integer("loss_scale_clean");
    meta_.optimizer = hdf5_text_attribute(file_, "optimizer");
    meta_.config_toml = hdf5_text_attribute(file_, "config");
    tensors_ = ParamLayout(m).tensors();
  } catch (...) {
    H5Fclose(file_);
    throw;
  }
}

H5CheckpointReader::~H5CheckpointReader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool H5CheckpointReader::has(const std::string& section) const {
  return H5Lexists(file_, section.c_str(), H5P_DEFAULT) > 0;
}

void H5CheckpointReader::read(const std::string& section, size_t begin, size_t n, float* dst) const {
  if (!has(section)) fail_input(path_, "holds no ", section);
  for (const TensorInfo& t : tensors_) {  // the tensors [begin, begin + n) overlaps, in order
    const size_t lo = std::max(begin, t.range.begin), hi = std::min(begin + n, t.range.end);
    if (lo >= hi) continue;
    const std::string name = section + "/" + t.name();
    const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
    if (ds < 0) fail_input(path_, "corrupt checkpoint: no dataset ", name);
    const hid_t fs = H5Dget_space(ds);
    // The elements the dataset stores (wte: its rows; the model's padded rows beyond are zero).
    hsize_t dims[2] = {0, 0};
    const int rank = H5Sget_simple_extent_dims(fs, dims, nullptr);
    const size_t stored = rank == 1 ? size_t(dims[0]) : rank == 2 ? size_t(dims[0] * dims[1]) : 0;
    if (stored > t.range.size() || (rank == 2 && dims[1] != tensor_cols(t))) {
      H5Sclose(fs), H5Dclose(ds);
      fail_input(path_, "corrupt checkpoint: dataset ", name, " has a shape the model does not");
    }
    const size_t end = std::min(hi, t.range.begin + stored);
    herr_t r = 0;
    if (lo < end) {
      H5Sselect_none(fs);
      select_flat(fs, tensor_cols(t), lo - t.range.begin, end - t.range.begin);
      const hsize_t count = end - lo;
      const hid_t ms = H5Screate_simple(1, &count, nullptr);
      r = H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, dst + (lo - begin));
      H5Sclose(ms);
    }
    std::fill(dst + (std::max(lo, end) - begin), dst + (hi - begin), 0.0f);
    H5Sclose(fs), H5Dclose(ds);
    if (r < 0) fail_input(path_, "corrupt checkpoint: cannot read ", name);
  }
}

void H5CheckpointReader::verify() const {
  for (const char* section : {"params", "opt.m", "opt.v"}) {
    if (!has(section)) continue;
    for (const TensorInfo& t : tensors_) {
      const std::string name = std::string(section) + "/" + t.name();
      std::vector<float> v(t.range.size());
      read(section, t.range.begin, v.size(), v.data());
      const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
      const hid_t fs = H5Dget_space(ds);
      const size_t stored = size_t(H5Sget_simple_extent_npoints(fs));  // (read checked it fits)
      H5Sclose(fs);
      const uint64_t want = number_attribute<uint64_t>(ds, "checksum", H5T_NATIVE_UINT64, path_)[0];
      H5Dclose(ds);
      uint64_t sum = 0;
      for (size_t i = 0; i < stored; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &v[i], 4);
        sum = (sum + element_checksum(i, bits)) & kChecksumMask;
      }
      if (sum != want) fail_input(path_, "corrupt checkpoint: dataset ", name, " fails its checksum");
    }
  }
}

}  // namespace gpt2
