#pragma once
// Token + position embedding.
#include "tensor/column_sum.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/token_groups.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (N,C) = wte[tokens[n]] (Vp,C) + wpe[pos(n % T)] (maxT,C);   N = B*T, rows ordered (b, t)
// Vocabulary-parallel: wte holds rows [vocab_begin, vocab_begin + rows) only; other tokens add 0, and
// wpe is added where add_wpe (one tensor-parallel rank): the ranks' outputs sum to the embedding.
// positions (T): each local row's position in its sequence (context parallelism's chunks); empty: t.
template <class T>
void embedding_forward(Mat<T> out, Tokens tokens, CMat<T> wte, CMat<T> wpe, int seq_len, int vocab_begin = 0,
                       bool add_wpe = true, Vec<const int> positions = {}) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = out.extent(0), C = out.extent(1), rows = wte.extent(0);
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

// dwte (Vp,C) += scatter of dout rows by token; dwpe (maxT,C) += dout summed over the batch (row t
// of each sequence into position positions(t), or t).
// Deterministic, no atomics: the wte gradient in two fixed-order stages over the rows grouped by
// token (tensor/token_groups.hpp: groups, built from the same tokens) -- each chunk of a token's rows
// summed in row order, then a token's chunk sums in chunk order; parts (groups.max_parts(N), C) holds
// those. wpe: each (position, column block) sums its rows in row order. The same batch gives the
// same bits on every backend and thread count. Vocabulary-parallel: dwte holds rows [vocab_begin,
// vocab_begin + rows); tokens elsewhere are another rank's. An empty dwpe is skipped (the rank that
// did not add wpe).
template <class T>
void embedding_backward(Mat<T> dwte, Mat<T> dwpe, CMat<T> dout, const TokenGroups& groups, Mat<T> parts, int seq_len,
                        int vocab_begin = 0, Vec<const int> positions = {}) {
  const int N = dout.extent(0), C = dout.extent(1), Tn = seq_len, rows = dwte.extent(0);
  if (groups.N != N) Kokkos::abort("embedding_backward: token groups of another batch");
  // Work items own blocks of kColumnBlock channels (see column_sum.hpp).
  constexpr int W = kColumnBlock;
  const int blocks = (C + W - 1) / W;
  const Vec<int> order = groups.rows, begin = groups.chunk_begin, token = groups.chunk_token, part = groups.chunk_part;
  Kokkos::parallel_for(
      "embedding_backward_wte", IndexRange(0, int64_t(groups.chunks) * blocks),
      KOKKOS_LAMBDA(int64_t i) {
        const int ch = int(i / blocks), c0 = int(i % blocks) * W, w = c0 + W < C ? W : C - c0;
        const int tok = token(ch) - vocab_begin, p = part(ch);
        if (tok < 0 || tok >= rows) return;
        T acc[W] = {};
        for (int r = begin(ch); r < begin(ch + 1); ++r)
          for (int k = 0; k < w; ++k) acc[k] += dout(order(r), c0 + k);
        for (int k = 0; k < w; ++k) {
          if (p < 0) dwte(tok, c0 + k) += acc[k];  // the token's only chunk
          else parts(p, c0 + k) = acc[k];
        }
      });
  if (groups.runs > 0) {
    const Vec<int> run_token = groups.run_token, run_part = groups.run_part;
    Kokkos::parallel_for(
        "embedding_backward_wte_runs", IndexRange(0, int64_t(groups.runs) * C),
        KOKKOS_LAMBDA(int64_t i) {
          const int run = int(i / C), c = int(i % C), tok = run_token(run) - vocab_begin;
          if (tok < 0 || tok >= rows) return;
          T s = 0;
          for (int q = run_part(run); q < run_part(run + 1); ++q) s += parts(q, c);
          dwte(tok, c) += s;
        });
  }
  // wpe: for each position t, a column sum over the rows holding it (in row order).
  if (dwpe.extent(0) == 0) return;
  Kokkos::parallel_for(
      "embedding_backward_wpe", IndexRange(0, Tn * ((C + W - 1) / W)), KOKKOS_LAMBDA(int i) {
        const int blocks = (C + W - 1) / W, t = i / blocks, c0 = (i % blocks) * W, c1 = c0 + W < C ? c0 + W : C;
        const int pos = positions.extent(0) ? positions(t) : t;
        for (int n = t; n < N; n += Tn)
          for (int c = c0; c < c1; ++c) dwpe(pos, c) += dout(n, c);
      });
}

}  // namespace gpt2
