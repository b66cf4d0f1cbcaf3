#pragma once
// The AdamW update kernel (decoupled weight decay, PyTorch semantics) and gradient-norm clipping;
// the optimizer that runs it is modules/optim/adamw (train.optimizer = "adamw").
#include "tensor/elementwise.hpp"
#include "tensor/math.hpp"
#include "tensor/traffic.hpp"
#include "tensor/reduce.hpp"
#include "tensor/views.hpp"
#include "tensor/working_copy.hpp"

namespace gpt2 {

// PyTorch's clip_grad_norm_: factor = min(1, max_norm / (norm + 1e-6)); max_norm <= 0 disables.
KOKKOS_INLINE_FUNCTION double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double f = max_norm / (norm + 1e-6);
  return f < 1.0 ? f : 1.0;
}

// The factor the gradients are multiplied by: a value known on the host, or the clipping factor of a
// gradient norm whose square is still in device memory (a DeviceScalar the step's reductions and
// all-reduces filled), so the optimizer needs no host round trip.
struct GradScale {
  double value = 1;                // when sumsq is null
  const double* sumsq = nullptr;   // device memory: the global sum of squared gradients
  double max_norm = 0;
  GradScale(double v = 1) : value(v) {}  // NOLINT: a plain factor converts implicitly
  static GradScale clip(const double* sumsq, double max_norm) {
    GradScale s;
    s.sumsq = sumsq, s.max_norm = max_norm;
    return s;
  }
  KOKKOS_INLINE_FUNCTION double operator()() const {
    return sumsq ? clip_factor(km::sqrt(*sumsq), max_norm) : value;
  }
  // Where device memory is host memory, read the norm once here instead of in every kernel thread.
  GradScale on_host_if_possible() const {
    if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible && sumsq) {
      device_work();  // (a host read of device data: after what the stream was ordered after)
      return GradScale((*this)());
    }
    return *this;
  }
};

struct AdamWStep {
  double lr = 0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0;  // applied only where the caller says (tensors of rank >= 2)
  GradScale grad_scale;     // clipping factor, folded in here to save a pass over the gradients
  int step = 1;             // 1-based, for the bias corrections
  bool zero_grads = false;  // leave g = 0 for the next step's accumulation: saves a pass of its own
};

namespace detail {
// The update with its three choices made before the loop (a branch inside keeps it scalar on the
// host): Scale gives the gradient factor, ZeroGrads leaves g = 0, Copy writes the working copy.
template <class T>
struct FixedScale {
  T value;
  KOKKOS_INLINE_FUNCTION T operator()() const { return value; }
};
template <class T>
struct NormScale {  // the clipping factor of a squared norm in device memory
  GradScale s;
  KOKKOS_INLINE_FUNCTION T operator()() const { return T(s()); }
};

template <bool ZeroGrads, class T, class Scale, class Copy>
void adamw_pass(Vec<T> p, Vec<T> g, Vec<T> m, Vec<T> v, const AdamWStep& s, Scale scale, Copy copy) {
  const T b1 = s.beta1, b2 = s.beta2, eps = s.eps, lr = s.lr, wd = s.weight_decay;
  const T bc1 = T(1) / (T(1) - T(std::pow(s.beta1, s.step)));
  const T bc2 = T(1) / (T(1) - T(std::pow(s.beta2, s.step)));
  for_each_index(
      "adamw_update", int64_t(p.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const T gi = g(i) * scale();
        if constexpr (ZeroGrads) g(i) = T(0);
        const T mi = b1 * m(i) + (T(1) - b1) * gi;
        const T vi = b2 * v(i) + (T(1) - b2) * gi * gi;
        m(i) = mi;
        v(i) = vi;
        const T pi = p(i) - lr * (wd * p(i) + (mi * bc1) / (km::sqrt(vi * bc2) + eps));
        p(i) = pi;
        copy(i, float(pi));
      });
}

template <class T, class Scale>
void adamw_pass(Vec<T> p, Vec<T> g, Vec<T> m, Vec<T> v, const AdamWStep& s, Scale scale, const WorkingCopy& copy) {
  count_traffic(bytes_of(p, g, m, v), bytes_of(p, m, v) + (s.zero_grads ? bytes_of(g) : 0) + bytes_of(copy.bits));
  with_copy_writer(copy, [&](auto write) {
    if (s.zero_grads) adamw_pass<true>(p, g, m, v, s, scale, write);
    else adamw_pass<false>(p, g, m, v, s, scale, write);
  });
}
}  // namespace detail

// p (n), m (n), v (n) updated in place from g (n):
//   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;  g' = grad_scale * g
//   p = p - lr * (wd * p + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps))
//   g = 0 if s.zero_grads
//   copy = round(p) to 16 bits, when copy (n) is not empty (fp32 masters only)
template <class T>
void adamw_update(Vec<T> p, Vec<T> g, Vec<T> m, Vec<T> v, const AdamWStep& s, const WorkingCopy& copy = {}) {
  const GradScale scale = s.grad_scale.on_host_if_possible();
  if (scale.sumsq) detail::adamw_pass(p, g, m, v, s, detail::NormScale<T>{scale}, copy);
  else detail::adamw_pass(p, g, m, v, s, detail::FixedScale<T>{T(scale.value)}, copy);
}

}  // namespace gpt2
