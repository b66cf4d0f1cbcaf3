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
#include "core/error.hpp"
#include "tensor/flash_tiles.hpp"
#include "tensor/traffic.hpp"

namespace gpt2 {

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
// The tiles of both sides: the spans of query rows (qs) and key rows (ks), bt rows a tile, each
// span's tiles per part and in all.
struct TileGrid {
  AttnSpan qs, ks;
  int bt, qper, qtiles, kper, ktiles;
  TileGrid(const AttnSpan& q, const AttnSpan& k, int tile)
      : qs(q), ks(k), bt(checked(tile)), qper(tiles_per_part(q, bt)), qtiles(q.parts * qper),
        kper(tiles_per_part(k, bt)), ktiles(k.parts * kper) {}
  // (a tile of fewer columns than a register tile's would leave its scores uncomputed)
  static int checked(int tile) {
    if (tile <= 0 || tile % kCols != 0)
      fail("fused attention: a tile of ", tile, " rows; expected a positive multiple of ", kCols);
    return tile;
  }
  // Rows the tiles of one side load from the other over all the tile pairs causality lets meet, in
  // one head of one sequence: key rows (queries' tiles walking keys) or query rows (the key pass).
  // (A document mask skips more pairs; the count is the causal one.)
  int64_t rows_met(bool keys) const {
    int64_t rows = 0;
    for (int qt = 0; qt < qtiles; ++qt)
      for (int kt = 0; kt < ktiles; ++kt) {
        const Tile qr = span_tile(qs, qt, qper, bt), kr = span_tile(ks, kt, kper, bt);
        if (tiles_meet(qr, 0, kr)) rows += keys ? kr.n : qr.n;
      }
    return rows;
  }
};

// What the kernels read of a problem, resolved once and captured by value: its tiles, the head's
// columns padded (hp), the scores' scale.
template <class T>
struct Plan : TileGrid {
  CMat<T> q, kv;
  DocStarts doc;
  int hs, hp, nh, kcol, vcol;
  T scale;
  explicit Plan(const FlashProblem<T>& p)
      : TileGrid(p.qs, p.ks, p.tile), q(p.q), kv(p.kv), doc(p.doc), hs(p.hs), hp(padded(p.hs)), nh(p.nh),
        kcol(p.kcol), vcol(p.vcol), scale(T(1) / std::sqrt(T(p.hs))) {}
  KOKKOS_INLINE_FUNCTION int lo(int64_t row) const { return doc.extent(0) ? doc(row) : 0; }  // its document's start
  // Bytes of n rows of one head's columns, in every head and sequence.
  uint64_t head_rows(int64_t n) const { return uint64_t(n) * uint64_t(hs) * sizeof(T) * uint64_t(nh); }
};
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
  const flash::Plan<T> g(p);
  const bool first = pass.first, last = pass.last;
  const size_t values = flash::forward_values(g.bt, g.hs);
  const uint64_t B = uint64_t(p.B), state = bytes_of(m, l) * (last ? 0 : 1);  // m, l only between blocks
  count_traffic(B * g.head_rows(g.qs.rows() * (first ? 1 : 2) + 2 * g.rows_met(true)) + (first ? 0 : state),
                B * g.head_rows(g.qs.rows()) + (last ? bytes_of(lse) : state));
  Kokkos::parallel_for(
      "flash_attention_forward", flash::policy<T>(int64_t(p.B) * g.nh * g.qtiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int qt = team.league_rank() % g.qtiles, bh = team.league_rank() / g.qtiles, h = bh % g.nh, b = bh / g.nh;
        const flash::Tile qr = flash::span_tile(g.qs, qt, g.qper, g.bt);
        const int64_t row0 = int64_t(b) * g.qs.rows() + qr.row0, st0 = int64_t(bh) * g.qs.rows() + qr.row0;
        const int lo0 = g.lo(row0);
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data(), size_t(g.bt), size_t(g.hp)};
        T *Q = c.tile(), *Ob = c.tile(), *K = c.tile(), *Kt = c.tile(), *V = c.tile(), *S = c.scores();
        T *mr = c.row(), *lr = c.row();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int i) {
          flash::load_row<T>(Q, g.q, row0 + i, h * g.hs, i, qr.n, g.hs, g.hp, g.scale);
          flash::load_row<T>(Ob, O, row0 + i, h * g.hs, i, first ? 0 : qr.n, g.hs, g.hp, T(1));
          mr[i] = first || i >= qr.n ? T(-1e30) : m(st0 + i);
          lr[i] = first || i >= qr.n ? T(0) : l(st0 + i);
        });
        for (int kt = 0; kt < g.ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(g.ks, kt, g.kper, g.bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;  // (the same for the whole team)
          const int64_t krow0 = int64_t(b) * g.ks.rows() + kr.row0;
          team.team_barrier();  // every row is done with the previous tile
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int j) {
            flash::load_row<T>(K, g.kv, krow0 + j, g.kcol + h * g.hs, j, kr.n, g.hs, g.hp, T(1));
            flash::load_row<T>(V, g.kv, krow0 + j, g.vcol + h * g.hs, j, kr.n, g.hs, g.hp, T(1));
          });
          team.team_barrier();
          flash::team_transpose(team, Kt, K, g.bt, g.hp);
          team.team_barrier();
          flash::team_product(team, S, g.bt, Q, g.hp, Kt, g.bt, g.bt, g.bt, g.hp, false);  // S = scale q k^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int i) {
            const int lo = i < qr.n ? g.lo(row0 + i) : 0;
            const flash::KeyRange r = flash::visible_keys(qr, i, lo, kr);
            const T corr = flash::online_softmax_row(S + i * g.bt, r, g.bt, mr[i], lr[i]);
            T* o = Ob + i * g.hp;
            GPT2_VECTOR_LOOP
            for (int d = 0; d < g.hp; ++d) o[d] *= corr;
          });
          team.team_barrier();
          flash::team_product(team, Ob, g.hp, S, g.bt, V, g.hp, g.bt, g.hp, g.bt, true);  // O += P v
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          const T inv = last ? T(1) / lr[i] : T(1);
          for (int d = 0; d < g.hs; ++d) O(row0 + i, h * g.hs + d) = Ob[i * g.hp + d] * inv;
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
  count_traffic(bytes_of(dy, y), bytes_of(D));
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
  const flash::Plan<T> g(p);
  const size_t values = flash::dq_values(g.bt, g.hs);
  const uint64_t B = uint64_t(p.B), out = B * g.head_rows(g.qs.rows());
  count_traffic(B * g.head_rows(2 * g.qs.rows() + 2 * g.rows_met(true)) + bytes_of(lse, D) + (accumulate ? out : 0), out);
  Kokkos::parallel_for(
      "flash_attention_backward_dq", flash::policy<T>(int64_t(p.B) * g.nh * g.qtiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int qt = team.league_rank() % g.qtiles, bh = team.league_rank() / g.qtiles, h = bh % g.nh, b = bh / g.nh;
        const flash::Tile qr = flash::span_tile(g.qs, qt, g.qper, g.bt);
        const int64_t row0 = int64_t(b) * g.qs.rows() + qr.row0, st0 = int64_t(bh) * g.qs.rows() + qr.row0;
        const int lo0 = g.lo(row0);
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data(), size_t(g.bt), size_t(g.hp)};
        T *Q = c.tile(), *dO = c.tile(), *dQ = c.tile(), *Kt = c.tile(), *Vt = c.tile(), *K = c.tile(), *V = c.tile();
        T *S = c.scores(), *dP = c.scores(), *lr = c.row(), *Dr = c.row();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int i) {
          flash::load_row<T>(Q, g.q, row0 + i, h * g.hs, i, qr.n, g.hs, g.hp, g.scale);
          flash::load_row<T>(dO, dy, row0 + i, h * g.hs, i, qr.n, g.hs, g.hp, T(1));
          for (int d = 0; d < g.hp; ++d) dQ[i * g.hp + d] = 0;
          lr[i] = i < qr.n ? lse(st0 + i) : T(0);
          Dr[i] = i < qr.n ? D(st0 + i) : T(0);
        });
        for (int kt = 0; kt < g.ktiles; ++kt) {
          const flash::Tile kr = flash::span_tile(g.ks, kt, g.kper, g.bt);
          if (!flash::tiles_meet(qr, lo0, kr)) continue;
          const int64_t krow0 = int64_t(b) * g.ks.rows() + kr.row0;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int j) {
            flash::load_row<T>(K, g.kv, krow0 + j, g.kcol + h * g.hs, j, kr.n, g.hs, g.hp, T(1));
            flash::load_row<T>(V, g.kv, krow0 + j, g.vcol + h * g.hs, j, kr.n, g.hs, g.hp, T(1));
          });
          team.team_barrier();
          flash::team_transpose(team, Kt, K, g.bt, g.hp);
          flash::team_transpose(team, Vt, V, g.bt, g.hp);
          team.team_barrier();
          flash::team_product(team, S, g.bt, Q, g.hp, Kt, g.bt, g.bt, g.bt, g.hp, false);    // scale q k^T
          flash::team_product(team, dP, g.bt, dO, g.hp, Vt, g.bt, g.bt, g.bt, g.hp, false);  // dy v^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int i) {
            const int lo = i < qr.n ? g.lo(row0 + i) : 0;
            const flash::KeyRange r = flash::visible_keys(qr, i, lo, kr);
            const T lse_i = lr[i], D_i = Dr[i];
            T *s = S + i * g.bt, *dp = dP + i * g.bt;
            GPT2_VECTOR_LOOP
            for (int j = 0; j < g.bt; ++j) dp[j] = km::expf_(s[j] - lse_i) * (dp[j] - D_i) * g.scale;  // dS, scaled
            flash::zero_outside(dp, r.j0, r.j1, g.bt);
          });
          team.team_barrier();
          flash::team_product(team, dQ, g.hp, dP, g.bt, K, g.hp, g.bt, g.hp, g.bt, true);  // dq += dS k
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, qr.n), [&](int i) {
          for (int d = 0; d < g.hs; ++d) {
            T& out = dq(row0 + i, h * g.hs + d);
            out = accumulate ? out + dQ[i * g.hp + d] : dQ[i * g.hp + d];
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
  const flash::Plan<T> g(p);
  const size_t values = flash::dkdv_values(g.bt, g.hs);
  const uint64_t B = uint64_t(p.B), out = 2 * B * g.head_rows(g.ks.rows()), met = uint64_t(g.rows_met(false));
  const uint64_t per_row = 2 * uint64_t(sizeof(T)) + (p.doc.extent(0) ? sizeof(int) : 0);  // lse, D (and lo)
  count_traffic(out + B * g.head_rows(2 * met) + B * uint64_t(g.nh) * met * per_row + (accumulate ? out : 0), out);
  Kokkos::parallel_for(
      "flash_attention_backward_dkv", flash::policy<T>(int64_t(p.B) * g.nh * g.ktiles, values),
      KOKKOS_LAMBDA(const Member& team) {
        const int kt = team.league_rank() % g.ktiles, bh = team.league_rank() / g.ktiles, h = bh % g.nh, b = bh / g.nh;
        const flash::Tile kr = flash::span_tile(g.ks, kt, g.kper, g.bt);
        const int64_t krow0 = int64_t(b) * g.ks.rows() + kr.row0;
        const flash::Scratch<T> mem(team.team_scratch(0), values);
        flash::Carve<T> c{mem.data(), size_t(g.bt), size_t(g.hp)};
        T *K = c.tile(), *V = c.tile(), *dK = c.tile(), *dV = c.tile(), *Q = c.tile(), *Qt = c.tile(), *dO = c.tile();
        T *dOt = c.tile(), *S = c.scores(), *dP = c.scores(), *lr = c.row(), *Dr = c.row(), *lor = c.row();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int j) {
          flash::load_row<T>(K, g.kv, krow0 + j, g.kcol + h * g.hs, j, kr.n, g.hs, g.hp, g.scale);
          flash::load_row<T>(V, g.kv, krow0 + j, g.vcol + h * g.hs, j, kr.n, g.hs, g.hp, T(1));
          for (int d = 0; d < g.hp; ++d) dK[j * g.hp + d] = dV[j * g.hp + d] = 0;
        });
        for (int qt = 0; qt < g.qtiles; ++qt) {
          const flash::Tile qr = flash::span_tile(g.qs, qt, g.qper, g.bt);
          const int64_t row0 = int64_t(b) * g.qs.rows() + qr.row0, st0 = int64_t(bh) * g.qs.rows() + qr.row0;
          if (!flash::tiles_meet(qr, g.lo(row0), kr)) continue;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int i) {
            flash::load_row<T>(Q, g.q, row0 + i, h * g.hs, i, qr.n, g.hs, g.hp, T(1));
            flash::load_row<T>(dO, dy, row0 + i, h * g.hs, i, qr.n, g.hs, g.hp, T(1));
            lr[i] = i < qr.n ? lse(st0 + i) : T(0);
            Dr[i] = i < qr.n ? D(st0 + i) : T(0);
            // (positions are exact in T below 2^24; rows past the tile see nothing)
            lor[i] = i < qr.n ? T(g.lo(row0 + i)) : T(1e30);
          });
          team.team_barrier();
          flash::team_transpose(team, Qt, Q, g.bt, g.hp);
          flash::team_transpose(team, dOt, dO, g.bt, g.hp);
          team.team_barrier();
          flash::team_product(team, S, g.bt, K, g.hp, Qt, g.bt, g.bt, g.bt, g.hp, false);   // scale k q^T
          flash::team_product(team, dP, g.bt, V, g.hp, dOt, g.bt, g.bt, g.bt, g.hp, false);  // v dy^T
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, g.bt), [&](int j) {
            // Key j is seen by the tile's queries [i0, i1): at or after it, in its document (the
            // documents' starts rise with the row, so those rows are consecutive).
            const int kpos = kr.pos0 + j, i0 = j >= kr.n ? g.bt : kpos - qr.pos0 > 0 ? kpos - qr.pos0 : 0;
            const int i1 = flash::first_row_after(lor, i0, qr.n, T(kpos));
            T *s = S + j * g.bt, *dp = dP + j * g.bt;
            GPT2_VECTOR_LOOP
            for (int i = 0; i < g.bt; ++i) {
              const T pi = km::expf_(s[i] - lr[i]);
              s[i] = pi;
              dp[i] = pi * (dp[i] - Dr[i]) * g.scale;
            }
            flash::zero_outside(s, i0, i1, g.bt);
            flash::zero_outside(dp, i0, i1, g.bt);
          });
          team.team_barrier();
          flash::team_product(team, dV, g.hp, S, g.bt, dO, g.hp, g.bt, g.hp, g.bt, true);  // dv += P^T dy
          flash::team_product(team, dK, g.hp, dP, g.bt, Q, g.hp, g.bt, g.hp, g.bt, true);  // dk += dS^T q
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kr.n), [&](int j) {
          for (int d = 0; d < g.hs; ++d) {
            T& k = dkv(krow0 + j, g.kcol + h * g.hs + d);
            T& v = dkv(krow0 + j, g.vcol + h * g.hs + d);
            k = accumulate ? k + dK[j * g.hp + d] : dK[j * g.hp + d];
            v = accumulate ? v + dV[j * g.hp + d] : dV[j * g.hp + d];
          }
        });
      });
}

}  // namespace gpt2
