#include "tensor/gemm_lowp.hpp"
#if defined(GPT2_HAVE_ONEDNN)
#include "tensor/gemm_dnnl.hpp"
#endif

#include <type_traits>

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "tensor/convert.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>

#include "tensor/gemm_lt.hpp"
#endif

namespace gpt2 {

#if defined(KOKKOS_ENABLE_CUDA)

namespace detail {
cublasHandle_t cublas_handle();  // gemm.cpp: on Kokkos' stream
}

namespace {
template <class L>
cudaDataType_t cuda_type();
template <>
cudaDataType_t cuda_type<bf16>() {
  return CUDA_R_16BF;
}
template <>
cudaDataType_t cuda_type<fp16>() {
  return CUDA_R_16F;
}
template <class L>
const char* dtype_name() {
  return std::is_same_v<L, bf16> ? "bf16" : "fp16";
}
}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
template <class L>
void gemm_lowp(Op opA, Op opB, int M, int N, int K, float alpha, const L* A, int lda, const L* B, int ldb,
               float beta, float* C, int ldc) {
  auto op = [](Op o) { return o == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; };
  const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, dtype_name<L>(), "f32"});
  const cublasStatus_t s =
      cublasGemmEx(detail::cublas_handle(), op(opB), op(opA), N, M, K, &alpha, B, cuda_type<L>(), ldb, A,
                   cuda_type<L>(), lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS GemmEx failed with status ", int(s));
}
#define GPT2_GEMM_LOWP(L)                                                                               \
  template void gemm_lowp<L>(Op, Op, int, int, int, float, const L*, int, const L*, int, float, float*, int);
GPT2_GEMM_LOWP(bf16)
GPT2_GEMM_LOWP(fp16)
#undef GPT2_GEMM_LOWP
bool gemm_lowp_fuses_epilogue(bool) { return true; }  // (cuBLASLt, bf16 and fp16 alike)
bool gemm_lowp_stores_faster(bool) { return true; }
template <class L>
void gemm_lowp_with_epilogue(int M, int N, int K, const L* A, int lda, const L* B, int ldb, float* C, int ldc,
                             const GemmEpilogue& e) {
  const GemmScope scope({Op::N, Op::T, M, N, K, 1, lda, ldb, ldc, false, dtype_name<L>(), "f32"});
  count_epilogue(M, N, e);
  detail::lt_gemm_epilogue(cuda_type<L>(), CUBLAS_COMPUTE_32F, M, N, K, A, lda, B, ldb, C, ldc, e);
}
void gemm_lowp_force_convert(bool) {}
void gemm_lowp_reserve(bool, size_t) {}
std::string gemm_lowp_backend(bool) { return "cuBLAS"; }
void gemm_lowp_finalize() {}
void gemm_lowp_set_threads(int) {}

#else  // host


namespace {
bool g_force_convert = false;
Buffer<float> g_a32, g_b32;  // the converting path's fp32 inputs: grown as needed, freed at finalize

// The elements a row-major operand of `rows` x `cols` with leading dimension ld spans.
size_t span(Op op, int rows, int cols, int ld) {
  const int r = op == Op::N ? rows : cols, c = op == Op::N ? cols : rows;
  return r == 0 ? 0 : size_t(r - 1) * ld + c;
}

// The converting path: both inputs to fp32 scratch (exact), then the fp32 GEMM.
template <class L>
void convert_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const L* A, int lda, const L* B, int ldb,
                  float beta, float* C, int ldc) {
  Buffer<float>&a32 = g_a32, &b32 = g_b32;
  const size_t na = span(opA, M, K, lda), nb = span(opB, K, N, ldb);
  if (a32.extent(0) < na) a32 = uninitialized<float>("gemm_f32_copy", na);
  if (b32.extent(0) < nb) b32 = uninitialized<float>("gemm_f32_copy", nb);
  convert<float, L>(Vec<float>(a32.data(), na), Vec<const L>(A, na));
  convert<float, L>(Vec<float>(b32.data(), nb), Vec<const L>(B, nb));  // (host kernels: done on return)
  gemm<float>(opA, opB, M, N, K, alpha, a32.data(), lda, b32.data(), ldb, beta, C, ldc);
}
}  // namespace

template <>
void gemm_lowp<bf16>(Op opA, Op opB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                     int ldb, float beta, float* C, int ldc) {
#if defined(GPT2_HAVE_ONEDNN)
  if (!g_force_convert) {
    const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, "bf16", "f32"});
    // (The inputs' kernels are done: Kokkos' host backends finish a kernel before its launch returns.)
    dnnl_bf16_gemm(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  convert_gemm<bf16>(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <>
void gemm_lowp<fp16>(Op opA, Op opB, int M, int N, int K, float alpha, const fp16* A, int lda, const fp16* B,
                     int ldb, float beta, float* C, int ldc) {
  convert_gemm<fp16>(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool gemm_lowp_fuses_epilogue(bool bf16_inputs) {  // (per forward product: no string, unlike the backend's name)
#if defined(GPT2_HAVE_ONEDNN)
  return bf16_inputs && !g_force_convert;
#else
  (void)bf16_inputs;
  return false;
#endif
}
bool gemm_lowp_stores_faster(bool bf16_inputs) {  // oneDNN's bf16 matmul, else fp32 products after converting
  return gemm_lowp_fuses_epilogue(bf16_inputs) || gemm_stores_faster();
}
template <class L>
void gemm_lowp_with_epilogue(int M, int N, int K, const L* A, int lda, const L* B, int ldb, float* C, int ldc,
                             const GemmEpilogue& e) {
  if (!std::is_same_v<L, bf16> || !gemm_lowp_fuses_epilogue(true))
    fail("gemm_lowp_with_epilogue: this build's products add no epilogue (gemm_lowp_fuses_epilogue)");
#if defined(GPT2_HAVE_ONEDNN)
  if constexpr (std::is_same_v<L, bf16>) {
    const GemmScope scope({Op::N, Op::T, M, N, K, 1, lda, ldb, ldc, false, "bf16", "f32"});
    count_epilogue(M, N, e);
    dnnl_bf16_gemm(Op::N, Op::T, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, e);
  }
#endif
}

void gemm_lowp_force_convert(bool on) { g_force_convert = on; }
void gemm_lowp_reserve(bool bf16_inputs, size_t elems) {
  if (gemm_lowp_backend(bf16_inputs) != "convert+BLAS") return;
  for (Buffer<float>* b : {&g_a32, &g_b32})
    if (b->extent(0) < elems) *b = uninitialized<float>("gemm_f32_copy", elems);
}
std::string gemm_lowp_backend(bool bf16_inputs) {
#if defined(GPT2_HAVE_ONEDNN)
  if (bf16_inputs && !g_force_convert) return "oneDNN";
#endif
  return "convert+BLAS";
}
void gemm_lowp_finalize() { g_a32 = g_b32 = Buffer<float>(); }
void gemm_lowp_set_threads(int n) {
#if defined(GPT2_HAVE_ONEDNN)
  dnnl_set_threads(n);
#endif
}

#endif

template void gemm_lowp_with_epilogue<bf16>(int, int, int, const bf16*, int, const bf16*, int, float*, int,
                                            const GemmEpilogue&);
template void gemm_lowp_with_epilogue<fp16>(int, int, int, const fp16*, int, const fp16*, int, float*, int,
                                            const GemmEpilogue&);

}  // namespace gpt2
