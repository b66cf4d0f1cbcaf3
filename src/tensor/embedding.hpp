#pragma once
// Token + position embedding.
#include "tensor/column_sum.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (N,C) = wte[tokens[n]] (Vp,C) + wpe[n % T] (maxT,C);   N = B*T, rows ordered (b, t)
// Vocabulary-parallel: wte holds rows [vocab_begin, vocab_begin + rows) only; other tokens add 0, and
// wpe is added where add_wpe (one tensor-parallel rank): the ranks' outputs sum to the embedding.
template <class T>
void embedding_forward(Mat<T> out, Tokens tokens, CMat<T> wte, CMat<T> wpe, int seq_len, int vocab_begin = 0,
                       bool add_wpe = true) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = out.extent(0), C = out.extent(1), rows = wte.extent(0);
  Kokkos::parallel_for(
      "embedding_forward", team_policy<ExecSpace>(N), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tok = tokens(n) - vocab_begin, t = n % seq_len;
        const bool mine = tok >= 0 && tok < rows;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](int c) {
          out(n, c) = (mine ? wte(tok, c) : T(0)) + (add_wpe ? wpe(t, c) : T(0));
        });
      });
}

// dwte (Vp,C) += scatter of dout rows by token; dwpe (maxT,C) += dout summed over the batch.
// Deterministic: each output element is summed by one thread in row order (no atomics), so the same
// batch gives the same bits on every backend and every run. Vocabulary-parallel: dwte holds rows
// [vocab_begin, vocab_begin + rows); tokens elsewhere are another rank's. An empty dwpe is skipped
// (the rank that did not add wpe).
template <class T>
void embedding_backward(Mat<T> dwte, Mat<T> dwpe, CMat<T> dout, Tokens tokens, int seq_len, int vocab_begin = 0) {
  const int N = dout.extent(0), C = dout.extent(1), Tn = seq_len, rows = dwte.extent(0);
  // Work items own blocks of kColumnBlock channels (see column_sum.hpp) and walk the rows in order.
  constexpr int W = kColumnBlock;
  Kokkos::parallel_for(
      "embedding_backward_wte", Kokkos::RangePolicy<ExecSpace>(0, (C + W - 1) / W), KOKKOS_LAMBDA(int blk) {
        const int c0 = blk * W, c1 = c0 + W < C ? c0 + W : C;
        for (int n = 0; n < N; ++n) {
          const int tok = tokens(n) - vocab_begin;
          if (tok < 0 || tok >= rows) continue;
          for (int c = c0; c < c1; ++c) dwte(tok, c) += dout(n, c);
        }
      });
  // wpe: for each position t, a column sum over the rows holding it (in row order).
  if (dwpe.extent(0) == 0) return;
  Kokkos::parallel_for(
      "embedding_backward_wpe", Kokkos::RangePolicy<ExecSpace>(0, Tn * ((C + W - 1) / W)), KOKKOS_LAMBDA(int i) {
        const int blocks = (C + W - 1) / W, t = i / blocks, c0 = (i % blocks) * W, c1 = c0 + W < C ? c0 + W : C;
        for (int n = t; n < N; n += Tn)
          for (int c = c0; c < c1; ++c) dwpe(t, c) += dout(n, c);
      });
}

}  // namespace gpt2
