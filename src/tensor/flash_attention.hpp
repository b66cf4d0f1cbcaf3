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
#if defined(__CUDA_ARCH__)
#define GPT2_VECTOR_LOOP
#else
#define GPT2_VECTOR_LOOP _Pragma("omp simd")
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
  int tile = 64;  // rows of a query tile and of a key tile (flash_tile)
};

// Which block of a ring this call is: the first starts the running state, the last finishes it.
struct FlashPass {
  bool first = true, last = true;
};

namespace flash {
// Values of team scratch a tile of `t` rows takes: the forward, the backward's query pass and its key
// pass (each with one tile of both sides, the running rows and two rows of scores per row).
inline size_t forward_values(int t, int hs) { return size_t(t) * (4 * hs + t + 2); }
inline size_t dq_values(int t, int hs) { return size_t(t) * (6 * hs + 2 * t + 2); }
inline size_t dkdv_values(int t, int hs) { return size_t(t) * (8 * hs + 2 * t + 3); }
inline size_t max_values(int t, int hs) { return std::max({forward_values(t, hs), dq_values(t, hs), dkdv_values(t, hs)}); }

// The tile: the largest of 64, 32, 16, 8 rows whose scratch fits the backend's budget (a GPU's shared
// memory; the host's second-level cache, shared by nothing), never far beyond the rows there are.
template <class T>
int tile_for(int hs, int rows) {
  const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  const size_t budget = host ? 160 * 1024 : 46 * 1024;
  int t = 64;
  while (t > 8 && (max_values(t, hs) * sizeof(T) > budget || t / 2 >= rows)) t /= 2;
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
  const int hs = p.hs, nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
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
        T *Q = c.take(size_t(bt) * hs), *Ob = c.take(size_t(bt) * hs), *Kt = c.take(size_t(hs) * bt),
          *V = c.take(size_t(bt) * hs), *S = c.take(size_t(bt) * bt), *mr = c.take(bt), *lr = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          for (int d = 0; d < hs; ++d) {
            Q[i * hs + d] = q(row0 + i, h * hs + d) * scale;
            Ob[i * hs + d] = first ? T(0) : O(row0 + i, h * hs + d);
          }
          mr[i] = first ? T(-1e30) : m(st0 + i);
          lr[i] = first ? T(0) : l(st0 + i);
        });
        for (int kt = 0; kt < ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(ks, kt, kper, bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;  // (the same for the whole team)
          const int64_t krow0 = int64_t(b) * ks.rows() + kr.row0;
          team.team_barrier();  // every row is done with the previous tile
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
            for (int d = 0; d < hs; ++d) {
              Kt[d * bt + j] = kv(krow0 + j, kcol + h * hs + d);
              V[j * hs + d] = kv(krow0 + j, vcol + h * hs + d);
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
            // Row i sees the tile's keys [j0, j1): from its document's start to its own position.
            const int qpos = qr.pos0 + i, lo = doc.extent(0) ? doc(row0 + i) : 0;
            const int j0 = lo - kr.pos0 > 0 ? lo - kr.pos0 : 0;
            const int j1 = qpos - kr.pos0 + 1 < kr.n ? qpos - kr.pos0 + 1 : kr.n;
            if (j0 >= j1) return;
            T* s = S + i * bt;
            const T* qi = Q + i * hs;
            GPT2_VECTOR_LOOP
            for (int j = j0; j < j1; ++j) s[j] = 0;
            for (int d = 0; d < hs; ++d) {
              const T x = qi[d];
              const T* kd = Kt + d * bt;
              GPT2_VECTOR_LOOP
              for (int j = j0; j < j1; ++j) s[j] += x * kd[j];
            }
            T mx = s[j0];
            for (int j = j0 + 1; j < j1; ++j) mx = s[j] > mx ? s[j] : mx;
            const T mnew = mx > mr[i] ? mx : mr[i], corr = km::expf_(mr[i] - mnew);
            T sum = 0;
            GPT2_VECTOR_LOOP
            for (int j = j0; j < j1; ++j) s[j] = km::expf_(s[j] - mnew);
            for (int j = j0; j < j1; ++j) sum += s[j];
            lr[i] = lr[i] * corr + sum;
            mr[i] = mnew;
            T* o = Ob + i * hs;
            GPT2_VECTOR_LOOP
            for (int d = 0; d < hs; ++d) o[d] *= corr;
            for (int j = j0; j < j1; ++j) {
              const T pj = s[j];
              const T* vj = V + j * hs;
              GPT2_VECTOR_LOOP
              for (int d = 0; d < hs; ++d) o[d] += pj * vj[d];
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          const T inv = last ? T(1) / lr[i] : T(1);
          for (int d = 0; d < hs; ++d) O(row0 + i, h * hs + d) = Ob[i * hs + d] * inv;
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
  const int hs = p.hs, nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
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
        T *Q = c.take(size_t(bt) * hs), *dO = c.take(size_t(bt) * hs), *dQ = c.take(size_t(bt) * hs),
          *Kt = c.take(size_t(hs) * bt), *Vt = c.take(size_t(hs) * bt), *K = c.take(size_t(bt) * hs),
          *S = c.take(size_t(bt) * bt), *dP = c.take(size_t(bt) * bt), *lr = c.take(bt), *Dr = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          for (int d = 0; d < hs; ++d) {
            Q[i * hs + d] = q(row0 + i, h * hs + d) * scale;
            dO[i * hs + d] = dy(row0 + i, h * hs + d);
            dQ[i * hs + d] = 0;
          }
          lr[i] = lse(st0 + i);
          Dr[i] = D(st0 + i);
        });
        for (int kt = 0; kt < ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(ks, kt, kper, bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;
          const int64_t krow0 = int64_t(b) * ks.rows() + kr.row0;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
            for (int d = 0; d < hs; ++d) {
              const T k = kv(krow0 + j, kcol + h * hs + d);
              Kt[d * bt + j] = k;
              K[j * hs + d] = k;
              Vt[d * bt + j] = kv(krow0 + j, vcol + h * hs + d);
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
            const int qpos = qr.pos0 + i, lo = doc.extent(0) ? doc(row0 + i) : 0;
            const int j0 = lo - kr.pos0 > 0 ? lo - kr.pos0 : 0;
            const int j1 = qpos - kr.pos0 + 1 < kr.n ? qpos - kr.pos0 + 1 : kr.n;
            if (j0 >= j1) return;
            T *s = S + i * bt, *dp = dP + i * bt;
            const T *qi = Q + i * hs, *gi = dO + i * hs;
            GPT2_VECTOR_LOOP
            for (int j = j0; j < j1; ++j) s[j] = dp[j] = 0;
            for (int d = 0; d < hs; ++d) {
              const T x = qi[d], g = gi[d];
              const T *kd = Kt + d * bt, *vd = Vt + d * bt;
              GPT2_VECTOR_LOOP
              for (int j = j0; j < j1; ++j) {
                s[j] += x * kd[j];
                dp[j] += g * vd[j];
              }
            }
            const T lse_i = lr[i], D_i = Dr[i];
            GPT2_VECTOR_LOOP
            for (int j = j0; j < j1; ++j) {
              const T pj = km::expf_(s[j] - lse_i);
              dp[j] = pj * (dp[j] - D_i) * scale;  // dS, times the scale of the scores
            }
            T* o = dQ + i * hs;
            for (int j = j0; j < j1; ++j) {
              const T ds = dp[j];
              const T* kj = K + j * hs;
              GPT2_VECTOR_LOOP
              for (int d = 0; d < hs; ++d) o[d] += ds * kj[d];
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          for (int d = 0; d < hs; ++d) {
            T& out = dq(row0 + i, h * hs + d);
            out = accumulate ? out + dQ[i * hs + d] : dQ[i * hs + d];
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
  const int hs = p.hs, nh = p.nh, bt = p.tile, kcol = p.kcol, vcol = p.vcol;
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
        T *K = c.take(size_t(bt) * hs), *V = c.take(size_t(bt) * hs), *dK = c.take(size_t(bt) * hs),
          *dV = c.take(size_t(bt) * hs), *Q = c.take(size_t(bt) * hs), *Qt = c.take(size_t(hs) * bt),
          *dO = c.take(size_t(bt) * hs), *dOt = c.take(size_t(hs) * bt), *S = c.take(size_t(bt) * bt),
          *dP = c.take(size_t(bt) * bt), *lr = c.take(bt), *Dr = c.take(bt), *lor = c.take(bt);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
          for (int d = 0; d < hs; ++d) {
            K[j * hs + d] = kv(krow0 + j, kcol + h * hs + d) * scale;
            V[j * hs + d] = kv(krow0 + j, vcol + h * hs + d);
            dK[j * hs + d] = dV[j * hs + d] = 0;
          }
        });
        for (int qt = 0; qt < qtiles; ++qt) {
          const flash::Tile qr = flash::span_tile(qs, qt, qper, bt);
          const int64_t row0 = int64_t(b) * qs.rows() + qr.row0, st0 = int64_t(bh) * qs.rows() + qr.row0;
          if (!flash::tiles_meet(qr, doc.extent(0) ? doc(row0) : 0, kr)) continue;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
            for (int d = 0; d < hs; ++d) {
              const T x = q(row0 + i, h * hs + d), g = dy(row0 + i, h * hs + d);
              Q[i * hs + d] = Qt[d * bt + i] = x;
              dO[i * hs + d] = dOt[d * bt + i] = g;
            }
            lr[i] = lse(st0 + i);
            Dr[i] = D(st0 + i);
            lor[i] = T(doc.extent(0) ? doc(row0 + i) : 0);  // (positions are exact in T below 2^24)
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
            // Key j is seen by the tile's queries [i0, i1): at or after it, in its document (the
            // documents' starts rise with the row, so those rows are consecutive).
            const int kpos = kr.pos0 + j, i0 = kpos - qr.pos0 > 0 ? kpos - qr.pos0 : 0;
            int i1 = i0;
            while (i1 < qr.n && lor[i1] <= T(kpos)) ++i1;
            if (i0 >= i1) return;
            T *s = S + j * bt, *dp = dP + j * bt;
            const T *kj = K + j * hs, *vj = V + j * hs;
            GPT2_VECTOR_LOOP
            for (int i = i0; i < i1; ++i) s[i] = dp[i] = 0;
            for (int d = 0; d < hs; ++d) {
              const T x = kj[d], w = vj[d];
              const T *qd = Qt + d * bt, *gd = dOt + d * bt;
              GPT2_VECTOR_LOOP
              for (int i = i0; i < i1; ++i) {
                s[i] += x * qd[i];
                dp[i] += w * gd[i];
              }
            }
            GPT2_VECTOR_LOOP
            for (int i = i0; i < i1; ++i) {
              const T pi = km::expf_(s[i] - lr[i]);
              s[i] = pi;
              dp[i] = pi * (dp[i] - Dr[i]) * scale;
            }
            T *gk = dK + j * hs, *gv = dV + j * hs;
            for (int i = i0; i < i1; ++i) {
              const T pi = s[i], ds = dp[i];
              const T *qi = Q + i * hs, *gi = dO + i * hs;
              GPT2_VECTOR_LOOP
              for (int d = 0; d < hs; ++d) {
                gv[d] += pi * gi[d];
                gk[d] += ds * qi[d];
              }
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
          for (int d = 0; d < hs; ++d) {
            T& k = dkv(krow0 + j, kcol + h * hs + d);
            T& v = dkv(krow0 + j, vcol + h * hs + d);
            k = accumulate ? k + dK[j * hs + d] : dK[j * hs + d];
            v = accumulate ? v + dV[j * hs + d] : dV[j * hs + d];
          }
        });
      });
}

}  // namespace gpt2
