#pragma once
// Softmax + cross-entropy fused: the probabilities are never stored. Only the first V columns of the
// (N, Vp) logits are real tokens; the padded columns are ignored and get zero gradient.
#include "tensor/math.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// losses (N) = logsumexp(logits[n, :V]) - logits[n, target[n]];   lse (N) saved for backward
template <class T>
void crossentropy_forward(Vec<T> losses, Vec<T> lse, CMat<T> logits, Tokens targets, int V) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  Kokkos::parallel_for(
      "crossentropy_forward", Policy(logits.extent(0), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        T mx = logits(n, 0);
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V),
            [&](int j, T& m) { m = logits(n, j) > m ? logits(n, j) : m; }, Kokkos::Max<T>(mx));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, V), [&](int j, T& s) { s += km::exp(logits(n, j) - mx); },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T l = mx + km::log(sum);
          lse(n) = l;
          losses(n) = l - logits(n, targets(n));
        });
      });
}

// dlogits (N,Vp) = dloss * (softmax(logits) - onehot(target)), zero in padded columns.
// dlogits may alias logits (in place), which is how the model uses it.
template <class T>
void crossentropy_backward(Mat<T> dlogits, CMat<T> logits, CVec<T> lse, Tokens targets, int V,
                           T dloss) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int Vp = logits.extent(1);
  Kokkos::parallel_for(
      "crossentropy_backward", Policy(logits.extent(0), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tgt = targets(n);
        const T l = lse(n);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Vp), [&](int j) {
          const T p = j < V ? km::exp(logits(n, j) - l) : T(0);
          dlogits(n, j) = (p - (j == tgt ? T(1) : T(0))) * dloss;
        });
      });
}

}  // namespace gpt2
