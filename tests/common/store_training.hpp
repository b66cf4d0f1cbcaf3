#pragma once
// A Stage trained through a ParamStore as the trainer drives them -- begin_step, forward, backward,
// finish_gradients, the norm, optimizer_step -- with a load of new parameters between steps (a
// store's 16-bit copies must follow it). For tests that compare two stores' training bit for bit.
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "model/stage.hpp"
#include "parallel/param_store.hpp"

namespace gpt2::test {

// `steps` steps of B x T random tokens drawn from `seed` on a fresh store initialised with seed 5;
// before step 2 the parameters are halved through local_values / set_local_values (collective over
// the store's group). after_step(step) runs after each update. Returns every token's loss.
inline std::vector<float> train_through_store(ParamStore& store, const StageLayout& sl, Precision precision,
                                              uint64_t seed, int steps,
                                              const std::function<void(int)>& after_step = {}) {
  const int B = 2, T = sl.global().config().block_size, N = B * T;
  store.init(5);
  StageOptions<float> so;
  so.store = &store;
  so.precision = precision;
  Stage<float> stage(sl, B, T, so);
  auto a = stage.make_activations(B);
  Buffer<float> loss("loss", N);
  Kokkos::View<double, MemSpace> sumsq("sumsq");
  Rng r(seed);
  auto tokens = Kokkos::create_mirror_view(a.tokens);
  std::vector<float> out;
  for (int step = 0; step < steps; ++step) {
    if (step == 2) {
      std::vector<float> p = store.local_values("params");
      for (float& x : p) x *= 0.5f;
      store.set_local_values("params", p);
    }
    store.begin_step(step, 1);
    for (size_t i = 0; i < tokens.extent(0); ++i) tokens(i) = int(r.below(uint64_t(sl.global().config().vocab_size)));
    a.load(tokens.data(), tokens.data());
    stage.forward(a, Vec<float>(loss.data(), N), true, 1.0f / N);
    stage.backward(a);
    store.finish_gradients();
    store.grad_sum_of_squares(DeviceScalar(sumsq.data()));
    store.optimizer_step(1e-2, GradScale::clip(sumsq.data(), 1.0));
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Vec<const float>(loss.data(), N));
    out.insert(out.end(), h.data(), h.data() + N);
    if (after_step) after_step(step);
  }
  return out;
}

}  // namespace gpt2::test
