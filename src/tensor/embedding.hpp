#pragma once
// Token + position embedding.
#include "tensor/column_sum.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/token_groups.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (N,C) = wte[tokens[n]] (Vp,C) + wpe[pos(n % T)] (maxT,C);   N = B*T, rows ordered (b, t)
// Vocabulary-parallel: wte holds rows [vocab_begin, vocab_begin + rows) only; other tokens add 0, and
// wpe is added where add_wpe (one tensor-parallel rank): the ranks' outputs sum to the embedding.
// positions (seq_len): each local row's position in its sequence (context parallelism's chunks);
// empty: t. Document masks pass seq_len = N and each row's position in its document.
template <class T>
void embedding_forward(Mat<T> out, Tokens tokens, CMat<T> wte, CMat<T> wpe, int seq_len, int vocab_begin = 0,
                       bool add_wpe = true, Vec<const int> positions = {}) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = out.extent(0), C = out.extent(1), rows = wte.extent(0);
  count_traffic(bytes_of(tokens) + bytes_of(out) * (add_wpe ? 2 : 1), bytes_of(out));  // a wte and a wpe row a row
  Kokkos::parallel_for(
      "embedding_forward", team_policy<ExecSpace>(N), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tok = tokens(n) - vocab_begin;
        const int t = positions.extent(0) ? positions(n % seq_len) : n % seq_len;
        const bool mine = tok >= 0 && tok < rows;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          out(n, c) = (mine ? wte(tok, c) : T(0)) + (add_wpe ? wpe(t, c) : T(0));
        });
      });
}

// dst (rows,C) += dout's rows summed by group (tensor/token_groups.hpp: groups, built from the
// rows' keys): row k - key_begin of dst takes the rows of key k; keys outside dst are another rank's.
// Deterministic, no atomics: each chunk of a key's rows summed in row order, then a key's chunk sums
// in chunk order; parts (groups.max_parts(N), C) holds those. The same rows give the same bits on
// every backend and thread count.
template <class T>
void grouped_row_sum(Mat<T> dst, CMat<T> dout, const TokenGroups& groups, Mat<T> parts, int key_begin = 0) {
  const int N = dout.extent(0), C = dout.extent(1), rows = dst.extent(0);
  if (groups.N != N) Kokkos::abort("grouped_row_sum: groups of another batch");
  // Work items own blocks of kColumnBlock channels (see column_sum.hpp).
  constexpr int W = kColumnBlock;
  const int blocks = (C + W - 1) / W;
  const Vec<int> order = groups.rows, begin = groups.chunk_begin, key = groups.chunk_token, part = groups.chunk_part;
  // dout's rows (and their order), each key's row of dst or its chunk sums, the sums again by runs
  const uint64_t row = uint64_t(C) * sizeof(T), sums = uint64_t(groups.runs > 0 ? groups.chunks : 0) * row;
  count_traffic(bytes_of(dout, order) + uint64_t(groups.chunks) * row + sums, uint64_t(groups.chunks) * row + sums);
  Kokkos::parallel_for(
      "grouped_row_sum", IndexRange(0, int64_t(groups.chunks) * blocks), KOKKOS_LAMBDA(int64_t i) {
        const int ch = int(i / blocks), c0 = int(i % blocks) * W, w = c0 + W < C ? W : C - c0;
        const int k = key(ch) - key_begin, p = part(ch);
        if (k < 0 || k >= rows) return;
        T acc[W] = {};
        for (int r = begin(ch); r < begin(ch + 1); ++r)
          for (int j = 0; j < w; ++j) acc[j] += dout(order(r), c0 + j);
        for (int j = 0; j < w; ++j) {
          if (p < 0) dst(k, c0 + j) += acc[j];  // the key's only chunk
          else parts(p, c0 + j) = acc[j];
        }
      });
  if (groups.runs == 0) return;
  const Vec<int> run_key = groups.run_token, run_part = groups.run_part;
  Kokkos::parallel_for(
      "grouped_row_sum_runs", IndexRange(0, int64_t(groups.runs) * C), KOKKOS_LAMBDA(int64_t i) {
        const int run = int(i / C), c = int(i % C), k = run_key(run) - key_begin;
        if (k < 0 || k >= rows) return;
        T s = 0;
        for (int q = run_part(run); q < run_part(run + 1); ++q) s += parts(q, c);
        dst(k, c) += s;
      });
}

// dwte (Vp,C) += scatter of dout rows by token (grouped_row_sum over the tokens' groups);
// dwpe (maxT,C) += dout summed over the batch (row t of each sequence into position positions(t),
// or t): each (position, column block) sums its rows in row order. Vocabulary-parallel: dwte holds
// rows [vocab_begin, vocab_begin + rows); tokens elsewhere are another rank's. An empty dwpe is
// skipped (the rank that did not add wpe; or, under document masks, summed by the positions' groups).
template <class T>
void embedding_backward(Mat<T> dwte, Mat<T> dwpe, CMat<T> dout, const TokenGroups& groups, Mat<T> parts, int seq_len,
                        int vocab_begin = 0, Vec<const int> positions = {}) {
  const int N = dout.extent(0), C = dout.extent(1), Tn = seq_len;
  grouped_row_sum<T>(dwte, dout, groups, parts, vocab_begin);
  // wpe: for each position t, a column sum over the rows holding it (in row order).
  if (dwpe.extent(0) == 0) return;
  count_traffic(bytes_of(dout, dwpe), bytes_of(dwpe));
  constexpr int W = kColumnBlock;
  Kokkos::parallel_for(
      "embedding_backward_wpe", IndexRange(0, Tn * ((C + W - 1) / W)), KOKKOS_LAMBDA(int i) {
        const int blocks = (C + W - 1) / W, t = i / blocks, c0 = (i % blocks) * W, c1 = c0 + W < C ? c0 + W : C;
        const int pos = positions.extent(0) ? positions(t) : t;
        for (int n = t; n < N; n += Tn)
          for (int c = c0; c < c1; ++c) dwpe(pos, c) += dout(n, c);
      });
}

}  // namespace gpt2
