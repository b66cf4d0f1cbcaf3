#include "model/linear.hpp"

#include <algorithm>
#include <type_traits>

#include "core/error.hpp"
#include "tensor/convert.hpp"
#include "tensor/gemm_lowp.hpp"
#include "tensor/matmul.hpp"

namespace gpt2 {

template <class T>
Linear<T>::Linear(Precision p) : p_(p) {
  if (p_ != Precision::fp32 && !std::is_same_v<T, float>)
    fail("Linear: ", precision_name(p_), " is a precision of fp32 models only");
}

template <class T>
void Linear<T>::reserve(size_t operand, const size_t (&held)[kHoldSlots]) {
  if (!mixed()) return;
  size_t largest = operand;
  for (int s = 0; s < 2 + kHoldSlots; ++s) {
    scratch(s, s < 2 ? operand : held[s - 2]);
    if (s >= 2) largest = std::max(largest, held[s - 2]);
  }
  gemm_lowp_reserve(p_ == Precision::bf16, largest);  // (where 16-bit GEMMs convert to fp32)
}

template <class T>
uint16_t* Linear<T>::scratch(int slot, size_t n) {
  Buffer<uint16_t>& s = scratch_[slot];
  if (s.extent(0) < n) {
    s = Buffer<uint16_t>();  // free first: the peak stays one copy
    s = uninitialized<uint16_t>("gemm16_scratch", n);
  }
  return s.data();
}

template <class T>
const uint16_t* Linear<T>::low_operand(int slot, const GemmInput<T>& x) {
  if (x.is_low()) return x.low.data();
  const GemmInput<T> copy = GemmInput<T>::low_bits(scratch(slot, x.size()), x.rows(), x.cols());
  store(copy, x.full);
  return copy.low.data();
}

template <class T>
GemmInput<T> Linear<T>::hold(int slot, CMat<T> x) {
  if (!mixed()) return x;
  const GemmInput<T> copy = hold_storage(slot, x.extent(0), x.extent(1));
  store(copy, x);
  return copy;
}

template <class T>
GemmInput<T> Linear<T>::hold_storage(int slot, size_t rows, size_t cols) {
  if (!mixed()) return {};
  if (slot < 0 || slot >= kHoldSlots) fail("Linear::hold: slot ", slot, " of ", kHoldSlots);
  return GemmInput<T>::low_bits(scratch(2 + slot, rows * cols), rows, cols);
}

template <class T>
void Linear<T>::store(const GemmInput<T>& x, CMat<T> values) const {
  const Vec<const T> in(values.data(), values.size());
  write(x, [&](auto out) {
    using S = typename decltype(out)::value_type;
    convert<S, T>(Vec<S>(out.data(), out.size()), in);
  });
}

template <class T>
template <class L>
void Linear<T>::gemm16(Op opA, Op opB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                       float beta, T* C, int ldc) const {
  if constexpr (std::is_same_v<T, float>)
    gemm_lowp<L>(opA, opB, M, N, K, 1.0f, reinterpret_cast<const L*>(A), lda, reinterpret_cast<const L*>(B), ldb,
                 beta, C, ldc);
}

template <class T>
void Linear<T>::gemm_low(Op opA, Op opB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                         float beta, T* C, int ldc) const {
  if (p_ == Precision::bf16) gemm16<bf16>(opA, opB, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else gemm16<fp16>(opA, opB, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void Linear<T>::forward(Mat<T> out, const GemmInput<T>& in, const GemmInput<T>& w, CVec<T> b, CMat<T> residual) {
  if (!mixed()) return matmul_forward<T>(out, in.full, w.full, b, residual);
  const int N = int(in.rows()), C = int(in.cols()), OC = int(w.rows());
  const uint16_t *x = low_operand(0, in), *w16 = low_operand(1, w);
  if constexpr (std::is_same_v<T, float>) {
    if (fuses_epilogue() && (b.extent(0) || residual.extent(0))) {
      const GemmEpilogue e = epilogue_of(b, residual);
      if (p_ == Precision::bf16)
        return gemm_lowp_with_epilogue<bf16>(N, OC, C, reinterpret_cast<const bf16*>(x), C,
                                             reinterpret_cast<const bf16*>(w16), C, out.data(), OC, e);
      return gemm_lowp_with_epilogue<fp16>(N, OC, C, reinterpret_cast<const fp16*>(x), C,
                                           reinterpret_cast<const fp16*>(w16), C, out.data(), OC, e);
    }
  }
  gemm_low(Op::N, Op::T, N, OC, C, x, C, w16, C, 0.0f, out.data(), OC);
  add_bias_residual<T>(out, b, residual);
}

template <class T>
bool Linear<T>::fuses_epilogue() const {
  if (!std::is_same_v<T, float>) return false;
  return mixed() ? gemm_lowp_fuses_epilogue(p_ == Precision::bf16) : gemm_fuses_epilogue();
}

template <class T>
bool Linear<T>::stores_faster() const {
  if (!std::is_same_v<T, float>) return false;
  return mixed() ? gemm_lowp_stores_faster(p_ == Precision::bf16) : gemm_stores_faster();
}

template <class T>
void Linear<T>::backward_input(Mat<T> din, const GemmInput<T>& dout, const GemmInput<T>& w, bool accumulate) {
  if (!mixed()) return matmul_backward_input<T>(din, dout.full, w.full, accumulate);
  const int N = int(dout.rows()), C = int(w.cols()), OC = int(w.rows());
  gemm_low(Op::N, Op::N, N, C, OC, low_operand(0, dout), OC, low_operand(1, w), C, accumulate ? 1.0f : 0.0f,
           din.data(), C);
}

template <class T>
void Linear<T>::backward_weight(Mat<T> dw, Vec<T> db, const GemmInput<T>& dout, const GemmInput<T>& in, bool store) {
  if (!mixed()) return matmul_backward_weight<T>(dw, db, dout.full, in.full, store);
  if (db.extent(0) != 0 && dout.is_low()) fail("Linear: a bias gradient needs the output gradient in full precision");
  const int N = int(in.rows()), C = int(in.cols()), OC = int(dw.extent(0));
  gemm_low(Op::T, Op::N, OC, C, N, low_operand(0, dout), OC, low_operand(1, in), C, store ? 0.0f : 1.0f, dw.data(), C);
  if (db.extent(0) != 0) bias_backward<T>(db, dout.full);
}

template class Linear<float>;
template class Linear<double>;

}  // namespace gpt2
