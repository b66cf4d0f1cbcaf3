#pragma once
// Fused causal attention (FlashAttention-2's algorithm), written once as Kokkos team kernels: a team
// takes a tile of one head's queries (or, in the backward's key pass, of its keys) and walks the
// tiles of the other side that it can see, holding both in team scratch. Nothing T x T is stored:
// the forward keeps a running max and sum per query row (an online softmax) and saves the row's
// log-sum-exp; the backward recomputes each tile's probabilities from it.
//
// One source serves every caller. Whole-sequence attention is one call. Context parallelism's ring
// attention (model/stage_attention.cpp) calls the forward once per key/value block, with the running
// state (unnormalised output O, max m, sum l) carried in memory between blocks: a span says which
// global positions a rank's rows hold, so causality is decided by position, not by local row.
// Document masks (packed examples that must not see each other) are the start position of each
// query row's document: row t sees keys [start(t), t]; tiles with no visible pair are skipped.
//
// Shapes (per tensor-parallel rank: nh heads of hs): queries q (B * qs.rows(), >= nh*hs), head h in
// columns [h*hs, (h+1)*hs); keys and values in kv (B * ks.rows(), ...) at columns kcol + h*hs and
// vcol + h*hs; y, O (B * qs.rows(), nh*hs); the per-row-and-head vectors m, l, lse, D
// (B * nh * qs.rows()), index (b*nh + h) * qs.rows() + row; doc (B * qs.rows()).
#include <algorithm>

#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

// A loop each of whose iterations is independent (host: vectorised; a GPU thread runs it in order).
// The same with a running maximum `mx` or sum `sum` of its iterations.
#if defined(__CUDA_ARCH__)
#define GPT2_VECTOR_LOOP
#define GPT2_VECTOR_MAX
#define GPT2_VECTOR_SUM
#else
#define GPT2_VECTOR_LOOP _Pragma("omp simd")
#define GPT2_VECTOR_MAX _Pragma("omp simd reduction(max : mx)")
#define GPT2_VECTOR_SUM _Pragma("omp simd reduction(+ : sum)")
#endif

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

// Per query row, the global position its document starts at; empty: the sequence is one document.
using DocStarts = Kokkos::View<const int*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;

template <class T>
struct FlashProblem {
  CMat<T> q, kv;
  int kcol = 0, vcol = 0;  // kv's columns of head 0's keys and values
  AttnSpan qs, ks;
  DocStarts doc;
  int B = 1, nh = 1, hs = 1;
  int tile = 64;  // rows of a query tile and of a key tile: a multiple of flash::kCols (flash::tile_for)
};

// Which block of a ring this call is: the first starts the running state, the last finishes it.
struct FlashPass {
  bool first = true, last = true;
};

namespace flash {
// Products inside a team are register tiles of kRows rows by kCols columns (a GEMM's micro-kernel:
// each value of B loaded once for kRows rows). Tiles are at least kCols rows, and a head's columns
// are padded to a multiple of kCols with zeros in scratch, so every register tile is whole.
constexpr int kRows = 4, kCols = 16;
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
  KOKKOS_INLINE_FUNCTION T* take(size_t n) {
    T* out = p;
    p += n;
    return out;
  }
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

// Set-up: Kokkos' per-team workspace made as large as these kernels ask for (a host backend grows it
// at the first kernel that asks for more: an allocation in the step that runs it).
template <class T>
void reserve_flash_scratch(int hs, int rows) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int t = flash::tile_for<T>(hs, rows);
  Kokkos::parallel_for("reserve_flash_scratch", flash::policy<T>(1, flash::max_values(t, hs)),
                       KOKKOS_LAMBDA(const Member&) {});
}

// Forward: merges the keys and values of p.kv into the queries' running state. First block: the
// state starts empty (O, m, l not read). Last block: O becomes y = O / l and lse = m + log l
// (m and l not written); otherwise O, m, l hold the state for the next block.
template <class T>
void flash_attention_forward(const FlashProblem<T>& p, Mat<T> O, Vec<T> m, Vec<T> l, Vec<T> lse, FlashPass pass) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int hs = p.hs, hp = flash::padded(hs), nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
  const AttnSpan qs = p.qs, ks = p.ks;
  const int qper = flash::tiles_per_part(qs, bt), qtiles = qs.parts * qper;
  const int kper = flash::tiles_per_part(ks, bt), ktiles = ks.parts * kper;
  const CMat<T> q = p.q, kv = p.kv;
  const DocStarts doc = p.doc;
  const bool first = pass.first, last = pass.last;
  const T scale = T(1) / std::sqrt(T(hs));
  const size_t values = flash::forward_values(bt, hs);
  Kokkos::parallel_for(
      "flash_attention_forward", flash::policy<T>(int64_t(p.B) * nh * qtiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int qt = team.league_rank() % qtiles, bh = team.league_rank() / qtiles, h = bh % nh, b = bh / nh;
        const flash::Tile qr = flash::span_tile(qs, qt, qper, bt);
        const int64_t row0 = int64_t(b) * qs.rows() + qr.row0, st0 = int64_t(bh) * qs.rows() + qr.row0;
        const int lo0 = doc.extent(0) ? doc(row0) : 0;
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data()};
        T *Q = c.take(size_t(bt) * hp), *Ob = c.take(size_t(bt) * hp), *K = c.take(size_t(bt) * hp),
          *Kt = c.take(size_t(hp) * bt), *V = c.take(size_t(bt) * hp), *S = c.take(size_t(bt) * bt), *mr = c.take(bt),
          *lr = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int i) {
          flash::load_row<T>(Q, q, row0 + i, h * hs, i, qr.n, hs, hp, scale);
          flash::load_row<T>(Ob, O, row0 + i, h * hs, i, first ? 0 : qr.n, hs, hp, T(1));
          mr[i] = first || i >= qr.n ? T(-1e30) : m(st0 + i);
          lr[i] = first || i >= qr.n ? T(0) : l(st0 + i);
        });
        for (int kt = 0; kt < ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(ks, kt, kper, bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;  // (the same for the whole team)
          const int64_t krow0 = int64_t(b) * ks.rows() + kr.row0;
          team.team_barrier();  // every row is done with the previous tile
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int j) {
            flash::load_row<T>(K, kv, krow0 + j, kcol + h * hs, j, kr.n, hs, hp, T(1));
            flash::load_row<T>(V, kv, krow0 + j, vcol + h * hs, j, kr.n, hs, hp, T(1));
          });
          team.team_barrier();
          flash::team_transpose(team, Kt, K, bt, hp);
          team.team_barrier();
          flash::team_product(team, S, bt, Q, hp, Kt, bt, bt, bt, hp, false);  // S = scale q k^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int i) {
            const int lo = i < qr.n && doc.extent(0) ? doc(row0 + i) : 0;
            const T corr = flash::online_softmax_row(S + i * bt, flash::visible_keys(qr, i, lo, kr), bt, mr[i], lr[i]);
            T* o = Ob + i * hp;
            GPT2_VECTOR_LOOP
            for (int d = 0; d < hp; ++d) o[d] *= corr;
          });
          team.team_barrier();
          flash::team_product(team, Ob, hp, S, bt, V, hp, bt, hp, bt, true);  // O += P v
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          const T inv = last ? T(1) / lr[i] : T(1);
          for (int d = 0; d < hs; ++d) O(row0 + i, h * hs + d) = Ob[i * hp + d] * inv;
          if (last) {
            lse(st0 + i) = mr[i] + km::log(lr[i]);
          } else {
            m(st0 + i) = mr[i];
            l(st0 + i) = lr[i];
          }
        });
      });
}

// D = rowsum(dy * y) per row and head: the softmax backward's correction term (once per backward).
template <class T>
void flash_attention_row_dots(Vec<T> D, CMat<T> dy, CMat<T> y, int rows_per_sequence, int nh) {
  const int C = y.extent(1), hs = C / nh, R = rows_per_sequence;
  Kokkos::parallel_for(
      "flash_attention_row_dots", IndexRange(0, int64_t(y.extent(0)) * nh), KOKKOS_LAMBDA(int64_t i) {
        const int64_t row = i / nh;
        const int h = int(i % nh);
        const int64_t b = row / R, st = (b * nh + h) * R + row % R;
        T s = 0;
        for (int d = 0; d < hs; ++d) s += dy(row, h * hs + d) * y(row, h * hs + d);
        D(st) = s;
      });
}

// Backward, the query pass: dq (rows like q, head h at columns h*hs) = (or +=, accumulate) the
// queries' gradient from this block of keys. dy is the output's gradient (rows like q).
template <class T>
void flash_attention_backward_dq(const FlashProblem<T>& p, Mat<T> dq, CMat<T> dy, CVec<T> lse, CVec<T> D,
                                 bool accumulate) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int hs = p.hs, hp = flash::padded(hs), nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
  const AttnSpan qs = p.qs, ks = p.ks;
  const int qper = flash::tiles_per_part(qs, bt), qtiles = qs.parts * qper;
  const int kper = flash::tiles_per_part(ks, bt), ktiles = ks.parts * kper;
  const CMat<T> q = p.q, kv = p.kv;
  const DocStarts doc = p.doc;
  const T scale = T(1) / std::sqrt(T(hs));
  const size_t values = flash::dq_values(bt, hs);
  Kokkos::parallel_for(
      "flash_attention_backward_dq", flash::policy<T>(int64_t(p.B) * nh * qtiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int qt = team.league_rank() % qtiles, bh = team.league_rank() / qtiles, h = bh % nh, b = bh / nh;
        const flash::Tile qr = flash::span_tile(qs, qt, qper, bt);
        const int64_t row0 = int64_t(b) * qs.rows() + qr.row0, st0 = int64_t(bh) * qs.rows() + qr.row0;
        const int lo0 = doc.extent(0) ? doc(row0) : 0;
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data()};
        T *Q = c.take(size_t(bt) * hp), *dO = c.take(size_t(bt) * hp), *dQ = c.take(size_t(bt) * hp),
          *Kt = c.take(size_t(hp) * bt), *Vt = c.take(size_t(hp) * bt), *K = c.take(size_t(bt) * hp),
          *V = c.take(size_t(bt) * hp), *S = c.take(size_t(bt) * bt), *dP = c.take(size_t(bt) * bt), *lr = c.take(bt),
          *Dr = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int i) {
          flash::load_row<T>(Q, q, row0 + i, h * hs, i, qr.n, hs, hp, scale);
          flash::load_row<T>(dO, dy, row0 + i, h * hs, i, qr.n, hs, hp, T(1));
          for (int d = 0; d < hp; ++d) dQ[i * hp + d] = 0;
          lr[i] = i < qr.n ? lse(st0 + i) : T(0);
          Dr[i] = i < qr.n ? D(st0 + i) : T(0);
        });
        for (int kt = 0; kt < ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(ks, kt, kper, bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;
          const int64_t krow0 = int64_t(b) * ks.rows() + kr.row0;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int j) {
            flash::load_row<T>(K, kv, krow0 + j, kcol + h * hs, j, kr.n, hs, hp, T(1));
            flash::load_row<T>(V, kv, krow0 + j, vcol + h * hs, j, kr.n, hs, hp, T(1));
          });
          team.team_barrier();
          flash::team_transpose(team, Kt, K, bt, hp);
          flash::team_transpose(team, Vt, V, bt, hp);
          team.team_barrier();
          flash::team_product(team, S, bt, Q, hp, Kt, bt, bt, bt, hp, false);    // scale q k^T
          flash::team_product(team, dP, bt, dO, hp, Vt, bt, bt, bt, hp, false);  // dy v^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int i) {
            const int lo = i < qr.n && doc.extent(0) ? doc(row0 + i) : 0;
            const flash::KeyRange r = flash::visible_keys(qr, i, lo, kr);
            const T lse_i = lr[i], D_i = Dr[i];
            T *s = S + i * bt, *dp = dP + i * bt;
            GPT2_VECTOR_LOOP
            for (int j = 0; j < bt; ++j) dp[j] = km::expf_(s[j] - lse_i) * (dp[j] - D_i) * scale;  // dS, scaled
            flash::zero_outside(dp, r.j0, r.j1, bt);
          });
          team.team_barrier();
          flash::team_product(team, dQ, hp, dP, bt, K, hp, bt, hp, bt, true);  // dq += dS k
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          for (int d = 0; d < hs; ++d) {
            T& out = dq(row0 + i, h * hs + d);
            out = accumulate ? out + dQ[i * hp + d] : dQ[i * hp + d];
          }
        });
      });
}

// Backward, the key pass: dkv (rows like kv; the keys' gradient at kcol + h*hs, the values' at
// vcol + h*hs) = (or +=, accumulate) this block's gradient from the queries p.q.
template <class T>
void flash_attention_backward_dkv(const FlashProblem<T>& p, Mat<T> dkv, CMat<T> dy, CVec<T> lse, CVec<T> D,
                                  bool accumulate) {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const int hs = p.hs, hp = flash::padded(hs), nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
  const AttnSpan qs = p.qs, ks = p.ks;
  const int qper = flash::tiles_per_part(qs, bt), qtiles = qs.parts * qper;
  const int kper = flash::tiles_per_part(ks, bt), ktiles = ks.parts * kper;
  const CMat<T> q = p.q, kv = p.kv;
  const DocStarts doc = p.doc;
  const T scale = T(1) / std::sqrt(T(hs));
  const size_t values = flash::dkdv_values(bt, hs);
  Kokkos::parallel_for(
      "flash_attention_backward_dkv", flash::policy<T>(int64_t(p.B) * nh * ktiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int kt = team.league_rank() % ktiles, bh = team.league_rank() / ktiles, h = bh % nh, b = bh / nh;
        const flash::Tile kr = flash::span_tile(ks, kt, kper, bt);
        const int64_t krow0 = int64_t(b) * ks.rows() + kr.row0;
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data()};
        T *K = c.take(size_t(bt) * hp), *V = c.take(size_t(bt) * hp), *dK = c.take(size_t(bt) * hp),
          *dV = c.take(size_t(bt) * hp), *Q = c.take(size_t(bt) * hp), *Qt = c.take(size_t(hp) * bt),
          *dO = c.take(size_t(bt) * hp), *dOt = c.take(size_t(hp) * bt), *S = c.take(size_t(bt) * bt),
          *dP = c.take(size_t(bt) * bt), *lr = c.take(bt), *Dr = c.take(bt), *lor = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int j) {
          flash::load_row<T>(K, kv, krow0 + j, kcol + h * hs, j, kr.n, hs, hp, scale);
          flash::load_row<T>(V, kv, krow0 + j, vcol + h * hs, j, kr.n, hs, hp, T(1));
          for (int d = 0; d < hp; ++d) dK[j * hp + d] = dV[j * hp + d] = 0;
        });
        for (int qt = 0; qt < qtiles; ++qt) {
          const flash::Tile qr = flash::span_tile(qs, qt, qper, bt);
          const int64_t row0 = int64_t(b) * qs.rows() + qr.row0, st0 = int64_t(bh) * qs.rows() + qr.row0;
          if (!flash::tiles_meet(qr, doc.extent(0) ? doc(row0) : 0, kr)) continue;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int i) {
            flash::load_row<T>(Q, q, row0 + i, h * hs, i, qr.n, hs, hp, T(1));
            flash::load_row<T>(dO, dy, row0 + i, h * hs, i, qr.n, hs, hp, T(1));
            lr[i] = i < qr.n ? lse(st0 + i) : T(0);
            Dr[i] = i < qr.n ? D(st0 + i) : T(0);
            // (positions are exact in T below 2^24; rows past the tile see nothing)
            lor[i] = i < qr.n ? T(doc.extent(0) ? doc(row0 + i) : 0) : T(1e30);
          });
          team.team_barrier();
          flash::team_transpose(team, Qt, Q, bt, hp);
          flash::team_transpose(team, dOt, dO, bt, hp);
          team.team_barrier();
          flash::team_product(team, S, bt, K, hp, Qt, bt, bt, bt, hp, false);   // scale k q^T
          flash::team_product(team, dP, bt, V, hp, dOt, bt, bt, bt, hp, false);  // v dy^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bt), [&](int j) {
            // Key j is seen by the tile's queries [i0, i1): at or after it, in its document (the
            // documents' starts rise with the row, so those rows are consecutive).
            const int kpos = kr.pos0 + j, i0 = j >= kr.n ? bt : kpos - qr.pos0 > 0 ? kpos - qr.pos0 : 0;
            int i1 = i0;
            while (i1 < qr.n && lor[i1] <= T(kpos)) ++i1;
            T *s = S + j * bt, *dp = dP + j * bt;
            GPT2_VECTOR_LOOP
            for (int i = 0; i < bt; ++i) {
              const T pi = km::expf_(s[i] - lr[i]);
              s[i] = pi;
              dp[i] = pi * (dp[i] - Dr[i]) * scale;
            }
            flash::zero_outside(s, i0, i1, bt);
            flash::zero_outside(dp, i0, i1, bt);
          });
          team.team_barrier();
          flash::team_product(team, dV, hp, S, bt, dO, hp, bt, hp, bt, true);  // dv += P^T dy
          flash::team_product(team, dK, hp, dP, bt, Q, hp, bt, hp, bt, true);  // dk += dS^T q
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
          for (int d = 0; d < hs; ++d) {
            T& k = dkv(krow0 + j, kcol + h * hs + d);
            T& v = dkv(krow0 + j, vcol + h * hs + d);
            k = accumulate ? k + dK[j * hp + d] : dK[j * hp + d];
            v = accumulate ? v + dV[j * hp + d] : dV[j * hp + d];
          }
        });
      });
}

}  // namespace gpt2
