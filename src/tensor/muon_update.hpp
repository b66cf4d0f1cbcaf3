#pragma once
// The Muon update kernels (Jordan et al. 2024, "Muon: an optimizer for hidden layers"): momentum with
// Nesterov, the Newton-Schulz quintic that orthogonalises the update, and the shape-scaled step with
// decoupled weight decay. The optimizer that runs them is modules/optim/muon (train.optimizer =
// "muon"). A weight W is (rows, cols) = (out, in), row-major. Momentum and the step are element-wise
// (a rank applies them to its shard of a matrix); only the Newton-Schulz iteration needs it whole.
#include <type_traits>
#include <utility>

#include "tensor/adamw_update.hpp"
#include "tensor/convert.hpp"
#include "tensor/gemm.hpp"
#include "tensor/gemm_lowp.hpp"

namespace gpt2 {

// The published quintic's coefficients: p(x) = a x + b x^3 + c x^5, applied to the singular values.
constexpr double kNewtonSchulzA = 3.4445, kNewtonSchulzB = -4.7750, kNewtonSchulzC = 2.0315;

// g' = grad_scale * g;  m = mu m + (1 - mu) g';  U = (1 - mu) g' + mu m  (Nesterov). Element-wise:
// g, m and U may be any run of a matrix (a rank's shard of it).
template <class T>
void muon_momentum(CVec<T> g, Vec<T> m, Vec<T> U, double mu, GradScale grad_scale) {
  const GradScale s = grad_scale.on_host_if_possible();
  const T b = T(mu);
  count_traffic(bytes_of(g, m), bytes_of(m, U));
  for_each_index(
      "muon_momentum", int64_t(g.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const T gi = g(i) * T(s());
        const T mi = b * m(i) + (T(1) - b) * gi;
        m(i) = mi;
        U(i) = (T(1) - b) * gi + b * mi;
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

// bf16 products: the iteration's GEMMs read X, A and B rounded to bf16 (these workspaces: rows cols,
// m m, m m) and accumulate in fp32 (gemm_lowp), its sums stay fp32. Empty: the products in T.
struct NewtonSchulzLowp {
  Vec<bf16> x, a, b;
  bool on() const { return x.extent(0) > 0; }
};

namespace detail {
// C (M, N) = op(A) op(B) + beta C, A and B read in T or, with `low`, from their bf16 roundings.
template <class T>
void ns_product(Op oa, Op ob, int M, int N, int K, T alpha, const T* A, const bf16* A16, int lda, const T* B,
                const bf16* B16, int ldb, T beta, T* C, int ldc, bool low) {
  if constexpr (std::is_same_v<T, float>)
    if (low) return gemm_lowp<bf16>(oa, ob, M, N, K, alpha, A16, lda, B16, ldb, beta, C, ldc);
  gemm<T>(oa, ob, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace detail

// X (rows, cols), row-major: X / (|X|_F + 1e-7), then `steps` times X <- a X + (b A + c A A) X with
// A = X X^T when rows <= cols, or X <- a X + X (b A + c A A) with A = X^T X when rows > cols (the same
// polynomial of the singular values, on the smaller Gram matrix: no transpose). Y (rows cols), A and B
// (m m, m = min(rows, cols)): workspaces; sumsq: device memory for the norm; low: bf16 products
// (T = float). Returns the buffer that holds the result (X or Y: they take turns).
template <class T>
Vec<T> newton_schulz5(Vec<T> X, Vec<T> Y, Vec<T> A, Vec<T> B, int rows, int cols, int steps, DeviceScalar sumsq,
                      const NewtonSchulzLowp& low = {}) {
  const int64_t count = int64_t(rows) * cols;
  const bool wide = rows <= cols, lp = low.on();
  const int m = wide ? rows : cols;
  Vec<T> x(X.data(), size_t(count)), y(Y.data(), size_t(count));
  Vec<T> a(A.data(), size_t(m) * m), b(B.data(), size_t(m) * m);
  const bf16 *x16 = low.x.data(), *a16 = low.a.data(), *b16 = low.b.data();
  auto round = [&](Vec<bf16> to, Vec<T> from) {
    if constexpr (std::is_same_v<T, float>)
      if (lp) convert<bf16, T>(Vec<bf16>(to.data(), from.extent(0)), from);
  };
  sum_of_squares<T>(x, sumsq);
  count_traffic(bytes_of(x), bytes_of(x));
  for_each_index(
      "newton_schulz_normalise", count, KOKKOS_LAMBDA(int64_t i) { x(i) = x(i) / T(km::sqrt(sumsq()) + 1e-7); });
  for (int k = 0; k < steps; ++k) {
    round(low.x, x);
    if (wide) detail::ns_product<T>(Op::N, Op::T, m, m, cols, T(1), x.data(), x16, cols, x.data(), x16, cols, T(0),
                                    a.data(), m, lp);  // A = X X^T
    else detail::ns_product<T>(Op::T, Op::N, m, m, rows, T(1), x.data(), x16, cols, x.data(), x16, cols, T(0),
                               a.data(), m, lp);  // A = X^T X
    round(low.a, a);
    detail::scaled_copy<T>("newton_schulz_b", a, b, T(kNewtonSchulzB));
    detail::ns_product<T>(Op::N, Op::N, m, m, m, T(kNewtonSchulzC), a.data(), a16, m, a.data(), a16, m, T(1), b.data(),
                          m, lp);  // B = bA + cAA
    round(low.b, b);
    detail::scaled_copy<T>("newton_schulz_a", x, y, T(kNewtonSchulzA));
    if (wide) detail::ns_product<T>(Op::N, Op::N, m, cols, m, T(1), b.data(), b16, m, x.data(), x16, cols, T(1),
                                    y.data(), cols, lp);  // Y = aX + BX
    else detail::ns_product<T>(Op::N, Op::N, rows, m, m, T(1), x.data(), x16, cols, b.data(), b16, m, T(1), y.data(),
                               cols, lp);  // Y = aX + XB
    std::swap(x, y);
  }
  return x;
}

namespace detail {
// (A named function: a device lambda may not be written inside the generic lambda that picks Write.)
template <class T, class Write>
void muon_apply_pass(Vec<T> p, CVec<T> O, T keep, T step, Write write) {
  for_each_index(
      "muon_apply", int64_t(p.extent(0)), KOKKOS_LAMBDA(int64_t i) {
        const T pi = keep * p(i) - step * O(i);
        p(i) = pi;
        write(i, float(pi));
      });
}
}  // namespace detail

// p = p (1 - lr wd) - lr shape_scale O, O the orthogonalised update (the same run of the matrix as p);
// the working copy (p's count, when not empty) written in the same pass.
template <class T>
void muon_apply(Vec<T> p, CVec<T> O, double lr, double wd, double shape_scale, const WorkingCopy& copy) {
  const T keep = T(1 - lr * wd), step = T(lr * shape_scale);
  count_traffic(bytes_of(p, O), bytes_of(p) + bytes_of(copy.bits));
  detail::with_copy_writer(copy, [&](auto write) { detail::muon_apply_pass(p, O, keep, step, write); });
}

}  // namespace gpt2
