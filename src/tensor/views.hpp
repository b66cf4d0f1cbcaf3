#pragma once
// View aliases for the tensor layer. Everything is row-major (LayoutRight, stated explicitly because
// CUDA's default is LayoutLeft) and lives in device memory (tensor/device_memory.hpp).
// Kernels take unmanaged views (slices of the flat parameter / activation buffers); Buffer owns memory.
#include <string>

#include <Kokkos_Core.hpp>

#include "tensor/device_memory.hpp"

namespace gpt2 {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = DeviceMemory;
// Page-locked host memory: what the device copies to or from while the host goes on.
template <class T>
using PinnedBuffer = Kokkos::View<T*, Kokkos::LayoutRight, PinnedMemory>;

// A range of indices as wide as a tensor can be: Kokkos 3.4's default index on CUDA is a 32-bit
// unsigned int, which wraps above 2^32 elements.
using IndexRange = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<int64_t>>;

template <class T>
using Buffer = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;
template <class T>
using Vec = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;
template <class T>
using Mat = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Kokkos::MemoryUnmanaged>;

// Read-only forms whose element type is not deduced, so a Vec<float> converts to CVec<float>
// at the call of a template kernel<T>(Vec<T> out, CVec<T> in).
template <class T>
struct NoDeduce {
  using type = T;
};
template <class T>
using CVec = Vec<const typename NoDeduce<T>::type>;
template <class T>
using CMat = Mat<const typename NoDeduce<T>::type>;
using Tokens = Vec<const int>;  // token ids, (N) = (B*T) row-major
// Per row, the position in its sequence its document starts at; empty: the sequence is one document.
using DocStarts = Vec<const int>;

template <class T>
Vec<T> vec(T* p, size_t n) {
  return Vec<T>(p, n);
}
template <class T>
Mat<T> mat(T* p, size_t rows, size_t cols) {
  return Mat<T>(p, rows, cols);
}
// A buffer whose values the first kernel to use it writes: no pass setting it to zero.
template <class T>
Buffer<T> uninitialized(const std::string& label, size_t n) {
  return Buffer<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
}
// A matrix's elements as one vector (row-major: contiguous), for element-wise kernels.
template <class T>
Vec<T> flat(Mat<T> m) {
  return Vec<T>(m.data(), m.size());
}
template <class T>
Vec<const T> flat(Mat<const T> m) {
  return Vec<const T>(m.data(), m.size());
}

}  // namespace gpt2
