#pragma once
// Softmax + cross-entropy fused: the probabilities are never stored. Only the first V columns of the
// (N, Vp) logits are real tokens; the padded columns are ignored and get zero gradient.
// A negative target (kIgnoreTarget: a token outside the loss mask, e.g. the source of a translation
// pair or padding) contributes a loss of 0 and a zero gradient row, as PyTorch's ignore_index.
#include "tensor/math.hpp"
#include "tensor/team_reduce.hpp"
#include "tensor/traffic.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

constexpr int kIgnoreTarget = -1;  // targets below 0 are outside the loss

// losses (N) = logsumexp(logits[n, :V]) - logits[n, target[n]];   lse (N) saved for backward
template <class T>
void crossentropy_forward(Vec<T> losses, Vec<T> lse, CMat<T> logits, Tokens targets, int V) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  count_traffic(bytes_of(logits, targets), bytes_of(losses, lse));
  Kokkos::parallel_for(
      "crossentropy_forward", team_policy<ExecSpace>(logits.extent(0)),
      KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T mx = team_max<T>(team, V, [&](int j) { return logits(n, j); });
        const T sum = team_sum<T>(team, V, [&](int j) { return km::expf_(logits(n, j) - mx); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T l = mx + km::log(sum);
          const int tgt = targets(n);
          lse(n) = l;
          losses(n) = tgt < 0 ? T(0) : l - logits(n, tgt);
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
  count_traffic(bytes_of(logits, lse, targets), bytes_of(logits));
  Kokkos::parallel_for(
      "crossentropy_backward", team_policy<ExecSpace>(logits.extent(0)),
      KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tgt = targets(n);
        const T l = lse(n), d = tgt < 0 ? T(0) : dloss;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V),
                             [&](int j) { logits(n, j) = km::expf_(logits(n, j) - l) * d; });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V, Vp), [&](int j) { logits(n, j) = T(0); });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          if (tgt >= 0) logits(n, tgt) -= dloss;
        });
      });
}

// Both at once, for training: losses (N) as crossentropy_forward, and dlogits (N,Vp) as
// crossentropy_backward -- one exponential per logit instead of two. logits are overwritten (the
// exponentials); dlogits may be logits itself (in place) or a 16-bit copy the LM head's GEMMs read
// (S = bf16 / fp16 under mixed precision: no fp32 gradient written and rounded afterwards).
template <class T, class S = T>
void crossentropy_fused(Vec<T> losses, Mat<T> logits, Tokens targets, int V, T dloss, Mat<S> dlogits) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int Vp = logits.extent(1);
  // (the exponentials are written back and read again: on a GPU the row stays in cache)
  count_traffic(bytes_of(logits, targets), bytes_of(dlogits, losses));
  Kokkos::parallel_for(
      "crossentropy_fused", team_policy<ExecSpace>(logits.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tgt = targets(n);
        const T target_logit = tgt < 0 ? T(0) : logits(n, tgt);
        const T d = tgt < 0 ? T(0) : dloss;  // a masked row: no loss, no gradient
        const T mx = team_max<T>(team, V, [&](int j) { return logits(n, j); });
        const T sum = team_sum<T>(team, V, [&](int j) {
          const T e = km::expf_(logits(n, j) - mx);
          logits(n, j) = e;  // keep e for the gradient
          return e;
        });
        const T scale = d / sum;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](int j) {
          const T g = logits(n, j) * scale;
          dlogits(n, j) = S(j == tgt ? g - d : g);
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V, Vp), [&](int j) { dlogits(n, j) = S(T(0)); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { losses(n) = tgt < 0 ? T(0) : mx + km::log(sum) - target_logit; });
      });
}
// In place: logits (N,Vp) become dlogits.
template <class T>
void crossentropy_fused(Vec<T> losses, Mat<T> logits, Tokens targets, int V, T dloss) {
  crossentropy_fused<T, T>(losses, logits, targets, V, dloss, logits);
}

// ---- Vocabulary-parallel: each tensor-parallel rank holds the logits of a block of the vocabulary
// (its columns [vocab_begin, vocab_begin + Vp_local) of the whole; `cols` of them are real tokens).
// Three passes, with an all-reduce (max) after the first and one (sum) after the second, give every
// rank the loss and its own columns of dlogits, no rank ever holding all the logits.

// mx (N) = max over this rank's real columns (the lowest float where it has none)
template <class T>
void crossentropy_local_max(Vec<T> mx, CMat<T> logits, int cols) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  count_traffic(bytes_of(logits), bytes_of(mx));
  Kokkos::parallel_for(
      "crossentropy_local_max", team_policy<ExecSpace>(logits.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const T m = cols > 0 ? team_max<T>(team, cols, [&](int j) { return logits(n, j); })
                             : Kokkos::reduction_identity<T>::max();
        Kokkos::single(Kokkos::PerTeam(team), [&]() { mx(n) = m; });
      });
}

// With the global max: logits (N, Vp_local) become e = exp(logit - mx) (0 in padded columns), and
// sums (2N) = per row n: [2n] the sum of e, [2n+1] the target's logit where this rank holds the
// target, else 0 -- so that one all-reduce (sum) completes both.
template <class T>
void crossentropy_local_sums(Vec<T> sums, Mat<T> logits, CVec<T> mx, Tokens targets, int vocab_begin, int cols) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  const int Vl = logits.extent(1);
  count_traffic(bytes_of(logits, mx, targets), bytes_of(logits, sums));
  Kokkos::parallel_for(
      "crossentropy_local_sums", team_policy<ExecSpace>(logits.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank(), tgt = targets(n) < 0 ? -1 : targets(n) - vocab_begin;
        const T target_logit = tgt >= 0 && tgt < cols ? logits(n, tgt) : T(0);
        team.team_barrier();  // every thread has read it before any overwrites the row with exp()
        const T m = mx(n);
        const T sum = team_sum<T>(team, cols, [&](int j) {
          const T e = km::expf_(logits(n, j) - m);
          logits(n, j) = e;
          return e;
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols, Vl), [&](int j) { logits(n, j) = T(0); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          sums(2 * n) = sum;
          sums(2 * n + 1) = target_logit;
        });
      });
}

// With the global sums: losses (N) = mx + log(sum) - target logit; when need_grad, logits (holding
// e) become dlogits = dloss * (e / sum - onehot(target)) on this rank's columns. A masked row
// (negative target): loss 0, dlogits 0.
template <class T>
void crossentropy_parallel_finish(Vec<T> losses, Mat<T> logits, CVec<T> mx, CVec<T> sums, Tokens targets,
                                  int vocab_begin, int cols, T dloss, bool need_grad) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  count_traffic(bytes_of(mx, sums, targets) + (need_grad ? bytes_of(logits) : 0),
                bytes_of(losses) + (need_grad ? bytes_of(logits) : 0));
  Kokkos::parallel_for(
      "crossentropy_parallel_finish", team_policy<ExecSpace>(logits.extent(0)), KOKKOS_LAMBDA(const Member& team) {
        const int n = team.league_rank();
        const bool masked = targets(n) < 0;
        const int tgt = masked ? -1 : targets(n) - vocab_begin;
        const T sum = sums(2 * n);
        if (need_grad) {
          const T scale = masked ? T(0) : dloss / sum;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](int j) { logits(n, j) *= scale; });
          team.team_barrier();
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          losses(n) = masked ? T(0) : mx(n) + km::log(sum) - sums(2 * n + 1);
          if (need_grad && tgt >= 0 && tgt < cols) logits(n, tgt) -= dloss;
        });
      });
}

}  // namespace gpt2
