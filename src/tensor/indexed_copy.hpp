#pragma once
// Copies between one packed buffer and scattered positions of another, for a collective over many
// small ranges of a buffer (ZeRO's fp32 gather of the LayerNorms and biases beside the 16-bit
// matrices): one kernel over an index table instead of a copy per range.
#include <cstdint>

#include "tensor/elementwise.hpp"
#include "tensor/traffic.hpp"

namespace gpt2 {

namespace detail {
template <class T>
struct PackAt {
  Vec<T> dst;
  CVec<T> src;
  CVec<int32_t> at;
  KOKKOS_INLINE_FUNCTION void operator()(int64_t i) const { dst(i) = src(at(i)); }
};
template <class T>
struct UnpackTo {
  Vec<T> dst;
  CVec<T> src;
  CVec<int32_t> to;
  KOKKOS_INLINE_FUNCTION void operator()(int64_t i) const {
    if (to(i) >= 0) dst(to(i)) = src(i);
  }
};
}  // namespace detail

// packed (n) = src(at(i)) for i < n.
template <class T>
void pack_at(Vec<T> packed, CVec<T> src, CVec<int32_t> at) {
  count_traffic(bytes_of(at, packed), bytes_of(packed));
  for_each_index("pack_at", int64_t(at.extent(0)), detail::PackAt<T>{packed, src, at});
}

// dst(to(i)) = packed(i) for i < n where to(i) >= 0 (a negative entry is padding). The targets
// differ from each other, so the writes are independent.
template <class T>
void unpack_to(Vec<T> dst, CVec<T> packed, CVec<int32_t> to) {
  count_traffic(bytes_of(to, packed), bytes_of(packed));
  for_each_index("unpack_to", int64_t(to.extent(0)), detail::UnpackTo<T>{dst, packed, to});
}

// whole (rows, T c) from T column blocks (rows, c) stacked one after another:
// whole[r, j c + k] = stacked[j][r, k] (tensor parallelism's row-parallel slices, put together).
template <class T>
void interleave_columns(Vec<T> whole, CVec<T> stacked, int64_t rows, int64_t c, int64_t blocks) {
  count_traffic(bytes_of(stacked), bytes_of(whole));
  const int64_t width = c * blocks;
  for_each_index(
      "interleave_columns", rows * width, KOKKOS_LAMBDA(int64_t i) {
        const int64_t r = i / width, col = i % width, j = col / c;
        whole(i) = stacked((j * rows + r) * c + col % c);
      });
}

// block (rows, c) = whole[:, j c : (j + 1) c], whole (rows, T c).
template <class T>
void take_column_block(Vec<T> block, CVec<T> whole, int64_t rows, int64_t c, int64_t blocks, int64_t j) {
  count_traffic(bytes_of(block), bytes_of(block));
  for_each_index(
      "take_column_block", rows * c, KOKKOS_LAMBDA(int64_t i) {
        block(i) = whole((i / c) * c * blocks + j * c + i % c);
      });
}

}  // namespace gpt2
