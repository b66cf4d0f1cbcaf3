// Tensor parallelism without MPI: every tensor's split round-trips through the global layout, and
// the vocabulary-parallel cross-entropy (ranks simulated one after the other, their all-reduces done
// on the host) equals the plain one in double, its gradient checked against central differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/stage_layout.hpp"
#include "tensor/crossentropy.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;
using D = double;

namespace {
Vec<D> V(Buffer<D>& b) { return Vec<D>(b.data(), b.extent(0)); }
Mat<D> M(Buffer<D>& b, int rows, int cols) { return Mat<D>(b.data(), rows, cols); }

// The vocabulary-parallel loss of `logits` (N, Vp) over `ranks` simulated tp ranks: per-token
// losses, and the (N, Vp) gradient of sum(scale * loss) assembled from the ranks' columns.
struct Parallel {
  std::vector<D> losses, grad;
};
Parallel parallel_loss(const std::vector<D>& logits, Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> tgt, int N,
                       int Vp, int nv, int ranks, D scale) {
  const int Vl = Vp / ranks;
  std::vector<Buffer<D>> shard(ranks);
  std::vector<Buffer<D>> mx(ranks), sums(ranks), losses(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<D> s(size_t(N) * Vl);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < Vl; ++j) s[size_t(n) * Vl + j] = logits[size_t(n) * Vp + r * Vl + j];
    shard[r] = from_host(s);
    mx[r] = Buffer<D>("mx", N), sums[r] = Buffer<D>("sums", 2 * N), losses[r] = Buffer<D>("losses", N);
  }
  auto cols = [&](int r) { return std::clamp(nv - r * Vl, 0, Vl); };
  // pass 1 + all-reduce(max)
  std::vector<D> gmax(N, -std::numeric_limits<D>::infinity());
  for (int r = 0; r < ranks; ++r) {
    crossentropy_local_max<D>(V(mx[r]), M(shard[r], N, Vl), cols(r));
    const auto m = to_host(mx[r]);
    for (int n = 0; n < N; ++n) gmax[n] = std::max(gmax[n], m[n]);
  }
  // pass 2 + all-reduce(sum)
  std::vector<D> gsum(2 * N, 0.0);
  for (int r = 0; r < ranks; ++r) {
    mx[r] = from_host(gmax);
    crossentropy_local_sums<D>(V(sums[r]), M(shard[r], N, Vl), V(mx[r]), tgt, r * Vl, cols(r));
    const auto s = to_host(sums[r]);
    for (int i = 0; i < 2 * N; ++i) gsum[i] += s[i];
  }
  Parallel out;
  out.grad.assign(size_t(N) * Vp, 0.0);
  for (int r = 0; r < ranks; ++r) {
    sums[r] = from_host(gsum);
    crossentropy_parallel_finish<D>(V(losses[r]), M(shard[r], N, Vl), V(mx[r]), V(sums[r]), tgt, r * Vl, cols(r), scale,
                                    true);
    const auto g = to_host(shard[r]);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < Vl; ++j) out.grad[size_t(n) * Vp + r * Vl + j] = g[size_t(n) * Vl + j];
    const auto l = to_host(losses[r]);
    if (r == 0) out.losses = l;
    for (int n = 0; n < N; ++n) EXPECT_EQ(l[n], out.losses[n]) << "tp ranks disagree on the loss";
  }
  return out;
}
}  // namespace

TEST(TensorParallel, VocabParallelCrossEntropyEqualsThePlainOne) {
  const int N = 4, nv = 11, Vp = 16;  // with 4 ranks the last holds padding only
  auto logits = random_buffer<D>(size_t(N) * Vp, 5, 2.0);
  auto tgt = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("tgt", N);
  auto ht = Kokkos::create_mirror_view(tgt);
  for (int i = 0; i < N; ++i) ht(i) = (4 * i + 3) % nv;  // targets on different ranks
  Kokkos::deep_copy(tgt, ht);
  const D scale = 0.37;
  Buffer<D> plain("plain", N), lse("lse", N);
  crossentropy_forward<D>(V(plain), V(lse), M(logits, N, Vp), tgt, nv);
  auto dplain = from_host(to_host(logits));
  crossentropy_backward<D>(M(dplain, N, Vp), V(lse), tgt, nv, scale);
  const auto want_loss = to_host(plain), want_grad = to_host(dplain);
  for (int ranks : {1, 2, 4}) {
    const Parallel p = parallel_loss(to_host(logits), tgt, N, Vp, nv, ranks, scale);
    for (int n = 0; n < N; ++n) EXPECT_NEAR(p.losses[n], want_loss[n], 1e-13) << ranks << " ranks";
    for (size_t i = 0; i < want_grad.size(); ++i) EXPECT_NEAR(p.grad[i], want_grad[i], 1e-15) << ranks << " ranks";
    auto loss = [&] {
      double s = 0;
      for (D l : parallel_loss(to_host(logits), tgt, N, Vp, nv, ranks, scale).losses) s += scale * l;
      return s;
    };
    EXPECT_LE(gradcheck(logits, p.grad, loss, 1e-6), 1.0) << ranks << " ranks";
  }
}

// Masked rows (negative targets: a translation pair's source) under the vocabulary-parallel loss:
// loss 0 and a zero gradient row on every rank, the rest equal to the plain loss; checked against
// central differences.
TEST(TensorParallel, VocabParallelCrossEntropySkipsMaskedRows) {
  const int N = 5, nv = 11, Vp = 16;
  auto logits = random_buffer<D>(size_t(N) * Vp, 9, 2.0);
  auto tgt = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>("tgt", N);
  auto ht = Kokkos::create_mirror_view(tgt);
  const int targets[N] = {kIgnoreTarget, 9, kIgnoreTarget, 2, 5};
  for (int i = 0; i < N; ++i) ht(i) = targets[i];
  Kokkos::deep_copy(tgt, ht);
  const D scale = 0.29;
  Buffer<D> plain("plain", N), lse("lse", N);
  crossentropy_forward<D>(V(plain), V(lse), M(logits, N, Vp), tgt, nv);
  auto dplain = from_host(to_host(logits));
  crossentropy_backward<D>(M(dplain, N, Vp), V(lse), tgt, nv, scale);
  const auto want_loss = to_host(plain), want_grad = to_host(dplain);
  for (int ranks : {2, 4}) {
    const Parallel p = parallel_loss(to_host(logits), tgt, N, Vp, nv, ranks, scale);
    for (int n = 0; n < N; ++n) {
      EXPECT_NEAR(p.losses[n], want_loss[n], 1e-13) << ranks << " ranks";
      if (targets[n] < 0) {
        EXPECT_EQ(p.losses[n], 0.0);
        for (int j = 0; j < Vp; ++j) EXPECT_EQ(p.grad[size_t(n) * Vp + j], 0.0) << "masked row " << n;
      }
    }
    for (size_t i = 0; i < want_grad.size(); ++i) EXPECT_NEAR(p.grad[i], want_grad[i], 1e-15) << ranks << " ranks";
    auto loss = [&] {
      double s = 0;
      for (D l : parallel_loss(to_host(logits), tgt, N, Vp, nv, ranks, scale).losses) s += scale * l;
      return s;
    };
    EXPECT_LE(gradcheck(logits, p.grad, loss, 1e-6), 1.0) << ranks << " ranks";
  }
}

TEST(TensorParallel, EveryTensorSplitRoundTripsThroughTheGlobalLayout) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_embd = 32, c.vocab_size = 64, c.block_size = 16;
  const ParamLayout global(c);
  std::vector<float> g(global.total());
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(i);
  for (int tp : {2, 4})
    for (const auto& blocks : {std::pair<int, int>{0, 2}, std::pair<int, int>{1, 2}}) {  // with a tied copy
      std::vector<float> back(g.size(), -1.0f);
      std::vector<size_t> split_total(global.tensors().size(), 0);
      for (int r = 0; r < tp; ++r) {
        const StageLayout L(global, blocks.first, blocks.second, {tp, r});
        std::vector<float> local(L.local_size());
        global_to_local(L, [&](size_t b, size_t n, float* dst) { std::copy(g.begin() + long(b), g.begin() + long(b + n), dst); },
                        local.data());
        for (const TensorInfo& t : L.tensors()) {
          size_t n = 1;
          for (size_t d : t.shape) n *= d;
          ASSERT_EQ(n, t.range.size()) << t.name();
          for (size_t j = 0; j < t.range.size(); ++j)
            ASSERT_EQ(local[t.range.begin + j], g[t.global.at(j)]) << t.name() << " tp " << tp << " rank " << r;
          if (t.range.begin >= L.tied_size()) split_total[global.index(t.kind, t.layer)] += t.replicated ? 0 : n;
        }
        local_to_global(L, local.data(), back.data());
      }
      const StageLayout whole(global, blocks.first, blocks.second);
      for (const TensorInfo& t : whole.tensors()) {
        if (t.range.begin < whole.tied_size()) continue;
        const TensorInfo& gt = global.tensor(t.kind, t.layer);
        for (size_t i = gt.range.begin; i < gt.range.end; ++i) ASSERT_EQ(back[i], g[i]) << gt.name() << " tp " << tp;
        const size_t parts = split_total[global.index(t.kind, t.layer)];
        EXPECT_TRUE(parts == 0 || parts == gt.range.size()) << gt.name() << ": the parts cover " << parts;
      }
    }
}
