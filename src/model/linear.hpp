#pragma once
// The stage's linear layers (and the LM head) in the run's precision (tensor/precision.hpp).
// fp32: matmul.hpp as it is. bf16 / fp16: every GEMM reads 16-bit inputs and accumulates in fp32
// into fp32 outputs -- the weights (fp32 masters) and incoming gradients are rounded into scratch
// on the way in; the activations saved for the GEMMs (GemmInput) are stored in 16 bits already.
// Biases, residual adds and the weight and bias gradients stay in fp32.
#include <utility>

#include "tensor/gemm.hpp"
#include "tensor/half.hpp"
#include "tensor/precision.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// An activation that feeds GEMMs: in T (`full`), or under mixed precision in 16 bits (`low`, the
// bits of a bf16 or fp16 per element). Exactly one of the two is set (both empty: no tensor).
template <class T>
struct GemmInput {
  Mat<T> full;
  Mat<uint16_t> low;
  GemmInput() = default;
  GemmInput(Mat<T> m) : full(m) {}  // NOLINT: a T matrix is a GemmInput
  GemmInput(CMat<T> m) : full(const_cast<T*>(m.data()), m.extent(0), m.extent(1)) {}  // NOLINT
  static GemmInput low_bits(uint16_t* p, size_t rows, size_t cols) {
    GemmInput g;
    g.low = Mat<uint16_t>(p, rows, cols);
    return g;
  }
  bool is_low() const { return low.data() != nullptr; }
  size_t rows() const { return is_low() ? low.extent(0) : full.extent(0); }
  size_t cols() const { return is_low() ? low.extent(1) : full.extent(1); }
  size_t size() const { return rows() * cols(); }
  GemmInput row_block(size_t r0, size_t n) const {  // rows [r0, r0 + n)
    if (is_low()) return low_bits(low.data() + r0 * cols(), n, cols());
    return GemmInput(Mat<T>(full.data() + r0 * cols(), n, cols()));
  }
  template <class L>
  Mat<L> as() const {  // the 16-bit storage as L (bf16 or fp16)
    return Mat<L>(reinterpret_cast<L*>(low.data()), low.extent(0), low.extent(1));
  }
};

template <class T>
class Linear {
 public:
  explicit Linear(Precision p = Precision::fp32);
  Precision precision() const { return p_; }
  bool mixed() const { return p_ != Precision::fp32; }

  // out (N,OC) = in (N,C) @ w (OC,C)^T + b (OC) [+ residual (N,OC)]; b, residual may be empty.
  // Every operand is a GemmInput: a T matrix (converted to 16 bits in scratch under mixed precision)
  // or 16-bit data (saved activations, `hold`).
  void forward(Mat<T> out, const GemmInput<T>& in, const GemmInput<T>& w, CVec<T> b, CMat<T> residual = {});
  // Whether forward adds its bias and residual inside the product (a library epilogue) rather than
  // in a pass after it: a caller with a pass of its own to fuse them into asks first.
  bool fuses_epilogue() const;
  // din (N,C) = dout (N,OC) @ w (OC,C)   (or += when accumulate)
  void backward_input(Mat<T> din, const GemmInput<T>& dout, const GemmInput<T>& w, bool accumulate = false);
  // dw (OC,C) += dout^T @ in (store: =, as UnitStore::first_write answers when asked with
  // stores_faster(): it may hold the last step's values, which only a store replaces);
  // db (OC) += colsum(dout) when db is not empty (dout then in T)
  void backward_weight(Mat<T> dw, Vec<T> db, const GemmInput<T>& dout, const GemmInput<T>& in, bool store = false);
  bool stores_faster() const;  // the weight gradient's library: gemm_stores_faster

  // An operand used by several GEMMs, converted once: x itself in fp32, else its 16-bit copy in hold
  // slot `slot`, valid until that slot is held again. Slots: 0 and 1 the LM head's wte and dlogits,
  // 2 a block's output gradient (its input and weight gradients both read it).
  static constexpr int kHoldSlots = 3;
  GemmInput<T> hold(int slot, CMat<T> x);
  // Hold slot `slot` as the storage of a rows x cols operand that a kernel writes in 16 bits itself
  // (through write()); under fp32 there is none (an empty GemmInput: the kernel writes T).
  GemmInput<T> hold_storage(int slot, size_t rows, size_t cols);

  // Fills x by running f on it as a Mat<S>: S = T, or the 16-bit type of the precision. Kernels
  // templated on their output's storage type write the 16-bit activations directly.
  template <class F>
  void write(const GemmInput<T>& x, F&& f) const {
    if (!x.is_low()) f(x.full);
    else if (p_ == Precision::bf16) f(x.template as<bf16>());
    else f(x.template as<fp16>());
  }
  // Set-up (mixed precision): the 16-bit scratch made now at its largest -- `operand` elements for
  // each of a GEMM's two rounded operands, `held[s]` for hold slot s -- so that no step allocates.
  void reserve(size_t operand, const size_t (&held)[kHoldSlots]);
  // Bytes of the 16-bit copies of weights and gradients held for the GEMMs (mixed precision).
  size_t scratch_bytes() const {
    size_t n = 0;
    for (const auto& s : scratch_) n += s.extent(0) * sizeof(uint16_t);
    return n;
  }
  // x = values (rounded to 16 bits under mixed precision).
  void store(const GemmInput<T>& x, CMat<T> values) const;

 private:
  // A 16-bit copy of a GEMM operand in scratch slot 0 or 1 (the operand itself when already 16-bit).
  const uint16_t* low_operand(int slot, const GemmInput<T>& x);
  uint16_t* scratch(int slot, size_t n);
  template <class L>
  void gemm16(Op opA, Op opB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
              float beta, T* C, int ldc) const;
  void gemm_low(Op opA, Op opB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                float beta, T* C, int ldc) const;
  Precision p_;
  Buffer<uint16_t> scratch_[2 + kHoldSlots];  // 0, 1: operands of one GEMM; then the held ones
};

}  // namespace gpt2
