#pragma once
// Token + position embedding.
#include "tensor/column_sum.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// out (N,C) = wte[tokens[n]] (Vp,C) + wpe[n % T] (maxT,C);   N = B*T, rows ordered (b, t)
template <class T>
void embedding_forward(Mat<T> out, Tokens tokens, CMat<T> wte, CMat<T> wpe, int seq_len) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int N = out.extent(0), C = out.extent(1);
  Kokkos::parallel_for(
      "embedding_forward", Policy(N, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tok = tokens(n), t = n % seq_len;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                             [&](int c) { out(n, c) = wte(tok, c) + wpe(t, c); });
      });
}

// dwte (Vp,C) += scatter of dout rows by token; dwpe (maxT,C) += dout summed over the batch.
// Deterministic: each output element is summed by one thread in row order (no atomics), so the same
// batch gives the same bits on every backend and every run.
template <class T>
void embedding_backward(Mat<T> dwte, Mat<T> dwpe, CMat<T> dout, Tokens tokens, int seq_len) {
  const int N = dout.extent(0), C = dout.extent(1), Tn = seq_len, B = N / Tn;
  // Work items own blocks of kColumnBlock channels (see column_sum.hpp) and walk the rows in order.
  constexpr int W = kColumnBlock;
  Kokkos::parallel_for(
      "embedding_backward_wte", Kokkos::RangePolicy<ExecSpace>(0, (C + W - 1) / W), KOKKOS_LAMBDA(int blk) {
        const int c0 = blk * W, c1 = c0 + W < C ? c0 + W : C;
        for (int n = 0; n < N; ++n) {
          const int tok = tokens(n);
          for (int c = c0; c < c1; ++c) dwte(tok, c) += dout(n, c);
        }
      });
  // wpe: for each position t, a column sum over the B rows holding it.
  Kokkos::parallel_for(
      "embedding_backward_wpe", Kokkos::RangePolicy<ExecSpace>(0, Tn * ((C + W - 1) / W)), KOKKOS_LAMBDA(int i) {
        const int blocks = (C + W - 1) / W, t = i / blocks, c0 = (i % blocks) * W, c1 = c0 + W < C ? c0 + W : C;
        for (int b = 0; b < B; ++b)
          for (int c = c0; c < c1; ++c) dwpe(t, c) += dout(b * Tn + t, c);
      });
}

}  // namespace gpt2
