#pragma once
// The Muon update kernels (Jordan et al. 2024, "Muon: an optimizer for hidden layers"): momentum with
// Nesterov, the Newton-Schulz quintic that orthogonalises the update, and the shape-scaled step with
// decoupled weight decay. The optimizer that runs them is modules/optim/muon (train.optimizer =
// "muon"). A weight W is (rows, cols) = (out, in), row-major; its update is orthogonalised in its
// wide form X (m, n), m <= n: X = U when rows <= cols, X = U^T otherwise.
#include <utility>

#include "tensor/adamw_update.hpp"
#include "tensor/gemm.hpp"

namespace gpt2 {

// The published quintic's coefficients: p(x) = a x + b x^3 + c x^5, applied to the singular values.
constexpr double kNewtonSchulzA = 3.4445, kNewtonSchulzB = -4.7750, kNewtonSchulzC = 2.0315;

// g' = grad_scale * g;  m = mu m + (1 - mu) g';  U = (1 - mu) g' + mu m  (Nesterov), written into X in
// its wide form. g, m: rows * cols; X: the same count.
template <class T>
void muon_momentum(CVec<T> g, Vec<T> m, Vec<T> X, int rows, int cols, double mu, GradScale grad_scale) {
  const GradScale s = grad_scale.on_host_if_possible();
  const T b = T(mu);
  const bool wide = rows <= cols;
  count_traffic(bytes_of(g, m), bytes_of(m, X));
  for_each_index(
      "muon_momentum", int64_t(rows) * cols, KOKKOS_LAMBDA(int64_t i) {
        const T gi = g(i) * T(s());
        const T mi = b * m(i) + (T(1) - b) * gi;
        m(i) = mi;
        const int64_t r = i / cols, c = i % cols;
        X(wide ? i : c * rows + r) = (T(1) - b) * gi + b * mi;
      });
}

namespace detail {
// y = alpha x (n)
template <class T>
void scaled_copy(const char* name, CVec<T> x, Vec<T> y, T alpha) {
  count_traffic(bytes_of(x), bytes_of(y));
  for_each_index(name, int64_t(x.extent(0)), KOKKOS_LAMBDA(int64_t i) { y(i) = alpha * x(i); });
}
}  // namespace detail

// X (m, n), m <= n: X / (|X|_F + 1e-7), then `steps` times X <- a X + (b A + c A A) X with A = X X^T.
// Y (m n), A and B (m m): workspaces; sumsq: device memory for the norm. Returns the buffer that
// holds the result (X or Y: they take turns).
template <class T>
Vec<T> newton_schulz5(Vec<T> X, Vec<T> Y, Vec<T> A, Vec<T> B, int m, int n, int steps, DeviceScalar sumsq) {
  const int64_t count = int64_t(m) * n;
  Vec<T> x(X.data(), size_t(count)), y(Y.data(), size_t(count));
  Vec<T> a(A.data(), size_t(m) * m), b(B.data(), size_t(m) * m);
  sum_of_squares<T>(x, sumsq);
  count_traffic(bytes_of(x), bytes_of(x));
  for_each_index(
      "newton_schulz_normalise", count, KOKKOS_LAMBDA(int64_t i) { x(i) = x(i) / T(km::sqrt(sumsq()) + 1e-7); });
  for (int k = 0; k < steps; ++k) {
    gemm<T>(Op::N, Op::T, m, m, n, T(1), x.data(), n, x.data(), n, T(0), a.data(), m);  // A = X X^T
    detail::scaled_copy<T>("newton_schulz_b", a, b, T(kNewtonSchulzB));
    gemm<T>(Op::N, Op::N, m, m, m, T(kNewtonSchulzC), a.data(), m, a.data(), m, T(1), b.data(), m);  // B = bA + cAA
    detail::scaled_copy<T>("newton_schulz_a", x, y, T(kNewtonSchulzA));
    gemm<T>(Op::N, Op::N, m, n, m, T(1), b.data(), m, x.data(), n, T(1), y.data(), n);  // Y = aX + BX
    std::swap(x, y);
  }
  return x;
}

namespace detail {
// (A named function: a device lambda may not be written inside the generic lambda that picks Write.)
template <class T, class Write>
void muon_apply_pass(Vec<T> p, CVec<T> X, int rows, int cols, T keep, T step, Write write) {
  const bool wide = rows <= cols;
  for_each_index(
      "muon_apply", int64_t(rows) * cols, KOKKOS_LAMBDA(int64_t i) {
        const int64_t r = i / cols, c = i % cols;
        const T pi = keep * p(i) - step * X(wide ? i : c * rows + r);
        p(i) = pi;
        write(i, float(pi));
      });
}
}  // namespace detail

// p = p (1 - lr wd) - lr shape_scale O, O (rows, cols) the orthogonalised update whose wide form
// is X; the working copy (rows * cols, when not empty) written in the same pass.
template <class T>
void muon_apply(Vec<T> p, CVec<T> X, int rows, int cols, double lr, double wd, double shape_scale,
                const WorkingCopy& copy) {
  const T keep = T(1 - lr * wd), step = T(lr * shape_scale);
  count_traffic(bytes_of(p, X), bytes_of(p) + bytes_of(copy.bits));
  detail::with_copy_writer(copy, [&](auto write) { detail::muon_apply_pass(p, X, rows, cols, keep, step, write); });
}

}  // namespace gpt2
