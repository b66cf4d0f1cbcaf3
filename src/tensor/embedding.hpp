#pragma once
// Token + position embedding.
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
  const int64_t N = dout.extent(0), C = dout.extent(1), Tn = seq_len, B = N / Tn;
  Kokkos::parallel_for(
      "embedding_backward_wte", Kokkos::RangePolicy<ExecSpace>(0, C), KOKKOS_LAMBDA(int64_t c) {
        for (int64_t n = 0; n < N; ++n) dwte(tokens(n), c) += dout(n, c);
      });
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
  Kokkos::parallel_for(
      "embedding_backward_wpe", Policy({0, 0}, {Tn, C}), KOKKOS_LAMBDA(int64_t t, int64_t c) {
        T acc = 0;
        for (int64_t b = 0; b < B; ++b) acc += dout(b * Tn + t, c);
        dwpe(t, c) += acc;
      });
}

}  // namespace gpt2
