#pragma once
// Checkpoints as one HDF5 file (checkpoint.format = "h5"), readable by h5py and by any layout:
//   /                      attributes: format ("gpt2-kokkos checkpoint"), format_version, step, updates,
//                          rng (4 x u64), loss_scale, loss_scale_clean, optimizer, config (the deck
//                          as TOML), n_layer, n_head, n_embd, vocab_size, block_size
//   /<section>/<tensor>    float32 at the tensor's GLOBAL shape -- sections params, opt.m, opt.v;
//                          tensors named as the model names them (wte, wpe, h.0.qkvw, ..., lnfb);
//                          wte has vocab_size rows (the padded rows the model holds are zero
//                          always and are not stored; a reader takes the rows a dataset has) --
//                          with attribute checksum: the sum of element_checksum over its elements
//                          (mod 2^48), so it is the same whichever ranks wrote which parts.
// Written by every rank, each its own slices at their offsets in the file (parallel/checkpoint_writer:
// the metadata once, by world rank 0; the data through O_DIRECT where it covers whole blocks, every
// dataset 4 KiB-aligned); read by range of the global flat layout, so each rank reads only what it holds.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/checkpoint.hpp"
#include "model/param_layout.hpp"

namespace gpt2 {

constexpr int kH5CheckpointVersion = 1;
constexpr uint64_t kChecksumMask = (uint64_t(1) << 48) - 1;

// One element's term of a dataset's checksum: a hash of its index in the tensor and its bits.
inline uint64_t element_checksum(uint64_t index, uint32_t bits) {
  uint64_t z = (index << 32 | bits) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) & kChecksumMask;
}

// The checksum's part of n consecutive values of a tensor, the first at element `first` (mod 2^48):
// one vectorised pass (the terms add up in any order, so any split of a tensor sums to the same).
inline uint64_t run_checksum(const float* values, uint64_t first, size_t n) {
  uint64_t sum = 0;
#pragma omp simd reduction(+ : sum)
  for (size_t k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, values + k, 4);
    sum += element_checksum(first + k, bits);
  }
  return sum & kChecksumMask;
}

// Adds the flat range [a, b) of a tensor with `cols` columns (1-D: its length) to an HDF5 dataspace
// selection: a partial first row, whole rows, a partial last row. Ranges added in increasing order
// select elements in the order a flat buffer holds them.
void select_flat(int64_t space, size_t cols, size_t a, size_t b);
inline size_t tensor_cols(const TensorInfo& t) { return t.shape.size() == 2 ? t.shape[1] : t.range.size(); }
// The shape a checkpoint stores a tensor at: its global shape, but wte without the padded rows.
inline std::vector<size_t> stored_shape(const TensorInfo& t, const ModelConfig& m) {
  if (t.kind != Param::wte) return t.shape;
  return {size_t(m.vocab_size), t.shape[1]};
}

bool is_h5_checkpoint(const std::string& path);  // the HDF5 signature

class H5CheckpointReader {
 public:
  explicit H5CheckpointReader(const std::string& path);  // InputError naming the file
  ~H5CheckpointReader();
  H5CheckpointReader(const H5CheckpointReader&) = delete;
  H5CheckpointReader& operator=(const H5CheckpointReader&) = delete;

  const CheckpointMeta& meta() const { return meta_; }
  bool has(const std::string& section) const;
  // Floats [begin, begin + n) of a section in the global layout.
  void read(const std::string& section, size_t begin, size_t n, float* dst) const;
  // Every dataset's checksum; InputError naming the file and the dataset on a mismatch.
  void verify() const;

 private:
  std::string path_;
  int64_t file_ = -1;  // HDF5 handle
  CheckpointMeta meta_;
  std::vector<TensorInfo> tensors_;  // the global layout's, in order
};

}  // namespace gpt2
