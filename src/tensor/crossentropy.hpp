#pragma once
// Softmax + cross-entropy fused: the probabilities are never stored. Only the first V columns of the
// (N, Vp) logits are real tokens; the padded columns are ignored and get zero gradient.
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
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
        const T mx = team_max<T>(team, V, [&](int j) { return logits(n, j); });
        const T sum = team_sum<T>(team, V, [&](int j) { return km::expf_(logits(n, j) - mx); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T l = mx + km::log(sum);
          lse(n) = l;
          losses(n) = l - logits(n, targets(n));
        });
      });
}

// In place: logits (N,Vp) in, dlogits = dloss * (softmax(logits) - onehot(target)) out, zero in the
// padded columns.
template <class T>
void crossentropy_backward(Mat<T> logits, CVec<T> lse, Tokens targets, int V, T dloss) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int Vp = logits.extent(1);
  Kokkos::parallel_for(
      "crossentropy_backward", Policy(logits.extent(0), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T l = lse(n);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V),
                             [&](int j) { logits(n, j) = km::expf_(logits(n, j) - l) * dloss; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V, Vp), [&](int j) { logits(n, j) = T(0); });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() { logits(n, targets(n)) -= dloss; });
      });
}

// Both at once, for training: losses (N) as crossentropy_forward, and logits (N,Vp) replaced by
// dlogits as crossentropy_backward -- one exponential per logit instead of two.
template <class T>
void crossentropy_fused(Vec<T> losses, Mat<T> logits, Tokens targets, int V, T dloss) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int Vp = logits.extent(1);
  Kokkos::parallel_for(
      "crossentropy_fused", Policy(logits.extent(0), Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tgt = targets(n);
        const T target_logit = logits(n, tgt);
        const T mx = team_max<T>(team, V, [&](int j) { return logits(n, j); });
        const T sum = team_sum<T>(team, V, [&](int j) {
          const T e = km::expf_(logits(n, j) - mx);
          logits(n, j) = e;  // keep e for the gradient
          return e;
        });
        const T scale = dloss / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](int j) { logits(n, j) *= scale; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V, Vp), [&](int j) { logits(n, j) = T(0); });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          losses(n) = mx + km::log(sum) - target_logit;
          logits(n, tgt) -= dloss;
        });
      });
}

}  // namespace gpt2
