// ParamStore on one rank (a serial communicator), as the trainer runs it: the squared gradient norm
// taken unit by unit while backward runs equals the sum over the final gradients, also when
// microbatches accumulate (a unit's part must wait for its last microbatch).
#include <cmath>

#include "model/stage.hpp"
#include "parallel/param_store.hpp"
#include "runtime/serial_communicator.hpp"
#include "parallel/zero.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
void expect_norm_of_final_gradients(int microbatches) {
  ModelConfig cfg;
  cfg.n_layer = 3, cfg.n_head = 2, cfg.n_embd = 16, cfg.vocab_size = 50, cfg.block_size = 8;
  const ParamLayout layout(cfg);
  const StageLayout sl(layout, 0, cfg.n_layer);
  SerialCommunicator dp;
  Tracer tracer;
  ParamStore store(sl, dp, zero_policy(0), 1000, "adamw", OptimizerConfig{}, tracer);
  store.init(3);
  StageOptions<float> so;
  so.store = &store;
  const int B = 2, T = 8, N = B * T;
  Stage<float> stage(sl, B, T, so);
  Buffer<float> losses("losses", N);
  Kokkos::View<double, MemSpace> sumsq("sumsq");
  auto a = stage.make_activations(B);
  Rng r(9);
  auto ht = Kokkos::create_mirror_view(a.tokens);
  for (int mb = 0; mb < microbatches; ++mb) {
    if (mb == 0) store.begin_step(0, microbatches);
    for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(cfg.vocab_size));
    a.load(ht.data(), ht.data());
    stage.forward(a, Vec<float>(losses.data(), N), true, 1.0f / N);
    stage.backward(a);
  }
  store.finish_gradients();
  store.grad_sum_of_squares(DeviceScalar(sumsq.data()));
  const auto g = to_host<float>(Vec<const float>(store.grads(0), sl.local_size()));
  long double want = 0;
  for (float x : g) want += (long double)x * x;
  const double got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sumsq)();
  ASSERT_GT(want, 0);
  EXPECT_NEAR(got, double(want), 1e-12 * double(want)) << microbatches << " microbatches";
}
}  // namespace

TEST(ParamStore, NormTakenAsUnitsCompleteEqualsTheFinalGradients) {
  expect_norm_of_final_gradients(1);
  expect_norm_of_final_gradients(3);
}
