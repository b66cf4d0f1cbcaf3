#pragma once
// The pieces fused attention's team kernels (tensor/flash_attention.hpp) are made of: which
// positions a rank's rows hold (AttnSpan), tiles of them and which tiles can see each other, team
// scratch, a team's register-tiled products, row loads and transposes, and one row's online softmax.
#include <algorithm>

#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// A rank's rows of one sequence: `parts` runs of L consecutive positions; local row r holds global
// position chunk[r / L] * L + r % L. One rank: one part of the whole sequence.
struct AttnSpan {
  int L = 0, parts = 1;
  int chunk[2] = {0, 0};
  KOKKOS_INLINE_FUNCTION int rows() const { return parts * L; }
  static AttnSpan whole(int T) { return {T, 1, {0, 0}}; }
  // Context parallelism over cp ranks: rank i holds chunks i and 2cp - 1 - i of L = T / 2cp.
  static AttnSpan ring(int L, int cp, int i) { return {L, 2, {i, 2 * cp - 1 - i}}; }
};

namespace flash {
// Products inside a team are register tiles of kRows rows by kCols columns (a GEMM's micro-kernel:
// each value of B loaded once for kRows rows). Tiles are multiples of kCols rows, and a head's
// columns are padded to a multiple of kCols with zeros in scratch, so every register tile is whole.
// With AVX-512 a register tile is 16 vector accumulators (8 x 32 floats of its 32 registers): an
// FMA's latency times its throughput needs 8 or more in flight, and 4 x 16 had 4 (fused attention
// took 1.2-1.35x the time on Zen 5; 16 x 16 and 4 x 64 spill). 4 x 16 is 8 of AVX2's 16 registers
// (8 x 32 would spill there), and a GPU thread keeps it too. Each element is summed in the same
// order whatever the tile, so the results are the same bits.
#if defined(__AVX512F__) && !defined(KOKKOS_ENABLE_CUDA)
constexpr int kRows = 8, kCols = 32;
#else
constexpr int kRows = 4, kCols = 16;
#endif
KOKKOS_INLINE_FUNCTION int padded(int hs) { return (hs + kCols - 1) / kCols * kCols; }

// Values of team scratch a tile of `t` rows takes: the forward (q, O, K, K^T, V, scores, three
// per-row values), the backward's query pass (q, dy, dq, K, K^T, V, V^T, scores, dP, two per-row)
// and its key pass (K, V, dK, dV, q, dy, q^T, dy^T, scores, dP, three per-row).
inline size_t forward_values(int t, int hs) { return size_t(t) * (5 * size_t(padded(hs)) + t + 3); }
inline size_t dq_values(int t, int hs) { return size_t(t) * (7 * size_t(padded(hs)) + 2 * t + 2); }
inline size_t dkdv_values(int t, int hs) { return size_t(t) * (8 * size_t(padded(hs)) + 2 * t + 3); }
inline size_t max_values(int t, int hs) { return std::max({forward_values(t, hs), dq_values(t, hs), dkdv_values(t, hs)}); }

// The tile: the largest of 64, 32, 16 rows whose scratch fits the backend's budget (a GPU's shared
// memory; on the host a core's second-level cache), never far beyond the rows there are.
template <class T>
int tile_for(int hs, int rows) {
  const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  const size_t budget = host ? 256 * 1024 : 46 * 1024;
  int t = 64;
  while (t > kCols && (max_values(t, hs) * sizeof(T) > budget || t / 2 >= rows)) t /= 2;
  return t;
}

// A tile of a span: its first local row, its first global position and its rows.
struct Tile {
  int row0, pos0, n;
};
KOKKOS_INLINE_FUNCTION Tile span_tile(const AttnSpan& s, int tile, int per_part, int size) {
  const int part = tile / per_part, i0 = (tile % per_part) * size;
  return {part * s.L + i0, s.chunk[part] * s.L + i0, s.L - i0 < size ? s.L - i0 : size};
}
KOKKOS_INLINE_FUNCTION int tiles_per_part(const AttnSpan& s, int size) { return (s.L + size - 1) / size; }

// Can any query of tile q (its first row's document starting at lo) see any key of tile k?
KOKKOS_INLINE_FUNCTION bool tiles_meet(const Tile& q, int lo, const Tile& k) {
  return k.pos0 <= q.pos0 + q.n - 1 && k.pos0 + k.n - 1 >= lo;
}

// Team scratch handed out in order.
template <class T>
struct Carve {
  T* p;
  size_t t, hp;  // tile rows, padded head columns
  KOKKOS_INLINE_FUNCTION T* take(size_t n) {
    T* out = p;
    p += n;
    return out;
  }
  KOKKOS_INLINE_FUNCTION T* tile() { return take(t * hp); }  // (t x hp), or transposed (hp x t)
  KOKKOS_INLINE_FUNCTION T* scores() { return take(t * t); }
  KOKKOS_INLINE_FUNCTION T* row() { return take(t); }  // a value per row
};

template <class T>
using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

template <class T>
Kokkos::TeamPolicy<ExecSpace> policy(int64_t league, size_t values) {
  auto p = team_policy<ExecSpace>(league);
  p.set_scratch_size(0, Kokkos::PerTeam(Scratch<T>::shmem_size(values)));
  return p;
}

// C (rows x cols, row-major, ldc) = (accumulate ? C : 0) + A (rows x K, lda) B (K x cols, ldb), rows
// a multiple of kRows and cols of kCols, shared out over the team's threads a register tile each.
template <class T, class Member>
KOKKOS_INLINE_FUNCTION void team_product(const Member& team, T* C, int ldc, const T* A, int lda, const T* B, int ldb,
                                         int rows, int cols, int K, bool accumulate) {
  const int col_tiles = cols / kCols;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows / kRows * col_tiles), [&](int item) {
    const int i0 = item / col_tiles * kRows, c0 = item % col_tiles * kCols;
    T acc[kRows][kCols];
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) acc[r][c] = accumulate ? C[(i0 + r) * ldc + c0 + c] : T(0);
    for (int k = 0; k < K; ++k) {
      const T* b = B + k * ldb + c0;
      for (int r = 0; r < kRows; ++r) {
        const T a = A[(i0 + r) * lda + k];
        GPT2_VECTOR_LOOP
        for (int c = 0; c < kCols; ++c) acc[r][c] += a * b[c];
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) C[(i0 + r) * ldc + c0 + c] = acc[r][c];
  });
}

// Row i of a tile of n rows from matrix row `row` of m, columns col..col+hs, times `scale`, into
// dst (stride hp); the padding (columns past hs, rows past n) zero.
template <class T, class Src>
KOKKOS_INLINE_FUNCTION void load_row(T* dst, const Src& m, int64_t row, int col, int i, int n, int hs, int hp, T scale) {
  T* out = dst + i * hp;
  if (i < n) {
    const auto* in = &m(row, col);
    GPT2_VECTOR_LOOP
    for (int d = 0; d < hs; ++d) out[d] = T(in[d]) * scale;
  }
  for (int d = i < n ? hs : 0; d < hp; ++d) out[d] = 0;
}

// dst (hp x t) = src (t x hp) transposed, shared out over the team.
template <class T, class Member>
KOKKOS_INLINE_FUNCTION void team_transpose(const Member& team, T* dst, const T* src, int t, int hp) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, hp), [&](int d) {
    GPT2_VECTOR_LOOP
    for (int j = 0; j < t; ++j) dst[d * t + j] = src[j * hp + d];
  });
}

// Zero row r's values outside [lo, hi) of a row of t.
template <class T>
KOKKOS_INLINE_FUNCTION void zero_outside(T* r, int lo, int hi, int t) {
  lo = lo < t ? lo : t;
  hi = hi < lo ? lo : hi;
  for (int j = 0; j < lo; ++j) r[j] = 0;
  for (int j = hi; j < t; ++j) r[j] = 0;
}

// The keys [j0, j1) of key tile k that query row i of tile q sees (rows past the tile see none):
// from its document's start `lo` to its own position.
struct KeyRange {
  int j0, j1;
};
KOKKOS_INLINE_FUNCTION KeyRange visible_keys(const Tile& q, int i, int lo, const Tile& k) {
  const int qpos = q.pos0 + i, j0 = lo - k.pos0 > 0 ? lo - k.pos0 : 0;
  return {j0, i >= q.n ? 0 : qpos - k.pos0 + 1 < k.n ? qpos - k.pos0 + 1 : k.n};
}

// The first of rows [i0, n) whose document starts after position pos, given each row's start lo
// (rising with the row); n when none does, i0 when i0 >= n. A binary search: a linear scan was a
// scalar loop of a tile's rows for each of its keys.
template <class T>
KOKKOS_INLINE_FUNCTION int first_row_after(const T* lo, int i0, int n, T pos) {
  int a = i0, b = n;  // rows before a start at or before pos; rows from b start after it
  while (a < b) {
    const int mid = a + (b - a) / 2;
    if (lo[mid] <= pos) a = mid + 1;
    else b = mid;
  }
  return a;
}

// One row's scores s (a row of t) against the keys [j0, j1) merged into its running max m and sum
// l: s becomes the softmax's numerators (0 outside the range); returns the factor the row's output
// so far is rescaled by.
template <class T>
KOKKOS_INLINE_FUNCTION T online_softmax_row(T* s, KeyRange r, int t, T& m, T& l) {
  T mx = T(-1e30);
  GPT2_VECTOR_MAX
  for (int j = r.j0; j < r.j1; ++j) mx = s[j] > mx ? s[j] : mx;
  const T mnew = mx > m ? mx : m, corr = r.j0 < r.j1 ? km::expf_(m - mnew) : T(1);
  if (r.j0 < r.j1) {
    GPT2_VECTOR_LOOP
    for (int j = 0; j < t; ++j) s[j] = km::expf_(s[j] - mnew);
  }
  zero_outside(s, r.j0, r.j1, t);
  T sum = 0;
  GPT2_VECTOR_SUM
  for (int j = r.j0; j < r.j1; ++j) sum += s[j];
  l = l * corr + sum;
  m = mnew;
  return corr;
}
}  // namespace flash

}  // namespace gpt2
