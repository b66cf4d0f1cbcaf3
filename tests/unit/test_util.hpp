#pragma once
// Helpers for kernel tests: device buffers filled on the host, and a central-difference gradient
// checker in double.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "tensor/views.hpp"

namespace gpt2::test {

template <class T>
Buffer<T> from_host(const std::vector<T>& h) {
  Buffer<T> b("test", h.size());
  auto m = Kokkos::create_mirror_view(b);
  for (size_t i = 0; i < h.size(); ++i) m(i) = h[i];
  Kokkos::deep_copy(b, m);
  return b;
}

template <class T>
std::vector<T> to_host(const Kokkos::View<const T*, Kokkos::LayoutRight, MemSpace,
                                          Kokkos::MemoryUnmanaged>& v) {
  auto m = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(m, v);
  return std::vector<T>(m.data(), m.data() + m.extent(0));
}
template <class T>
std::vector<T> to_host(const Buffer<T>& b) {
  return to_host<T>(Vec<const T>(b.data(), b.extent(0)));
}

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed, 7);
  std::vector<double> v(n);
  for (auto& x : v) x = scale * r.normal();
  return v;
}

template <class T>
Buffer<T> random_buffer(size_t n, uint64_t seed, double scale = 1.0) {
  auto v = random_vector(n, seed, scale);
  return from_host(std::vector<T>(v.begin(), v.end()));
}

template <class T>
T get(const Buffer<T>& b, size_t i) {
  T v;
  Kokkos::deep_copy(v, Kokkos::subview(b, i));
  return v;
}
template <class T>
void set(const Buffer<T>& b, size_t i, T v) {
  Kokkos::deep_copy(Kokkos::subview(b, i), v);
}

// sum_i a_i * b_i on the host
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks `analytic` (gradient of loss() wrt x) against central differences, element by element.
// Returns the largest |a - n| / (atol + |n|) seen; the caller asserts it is <= 1.
inline double gradcheck(const Buffer<double>& x, const std::vector<double>& analytic,
                        const std::function<double()>& loss, double h = 1e-6, double rtol = 1e-6,
                        double atol = 1e-8, size_t max_elems = 400) {
  EXPECT_EQ(x.extent(0), analytic.size());
  double worst = 0;
  const size_t n = x.extent(0), stride = n > max_elems ? n / max_elems + 1 : 1;
  for (size_t i = 0; i < n; i += stride) {
    const double x0 = get(x, i);
    set(x, i, x0 + h);
    const double lp = loss();
    set(x, i, x0 - h);
    const double lm = loss();
    set(x, i, x0);
    const double num = (lp - lm) / (2 * h);
    const double err = std::abs(analytic[i] - num) / (atol + rtol * std::abs(num));
    if (err > worst) worst = err;
    if (err > 1)
      ADD_FAILURE() << "element " << i << ": analytic " << analytic[i] << " numeric " << num;
  }
  return worst;
}

}  // namespace gpt2::test
