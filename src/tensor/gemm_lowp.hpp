#pragma once
// GEMMs with 16-bit inputs (bf16 or fp16) and fp32 accumulation and output, row-major as gemm.hpp:
//   C(M,N) (fp32) = alpha * op(A) * op(B) + beta * C,   A and B in L = bf16 | fp16.
// CUDA: cublasGemmEx (CUDA_R_16BF / CUDA_R_16F inputs, CUBLAS_COMPUTE_32F). Host: oneDNN's bf16
// matmul when the build has oneDNN (it uses AVX512_BF16 / AMX where the CPU has them); otherwise,
// and for fp16 (no CPU here has an fp16 GEMM), the inputs are converted to fp32 and go to sgemm --
// the same products, since a 16-bit value is exact in fp32.
#include <string>

#include "tensor/gemm.hpp"
#include "tensor/half.hpp"

namespace gpt2 {

template <class L>
void gemm_lowp(Op opA, Op opB, int M, int N, int K, float alpha, const L* A, int lda, const L* B, int ldb,
               float beta, float* C, int ldc);

// Whether this build's 16-bit forward products (bf16 inputs: true) apply an epilogue (gemm.hpp's
// GemmEpilogue) inside the library's call: oneDNN's bf16 matmul on the host, cuBLASLt (bf16 and
// fp16) on CUDA.
bool gemm_lowp_fuses_epilogue(bool bf16_inputs);
// gemm.hpp's gemm_stores_faster for this build's 16-bit weight-gradient products.
bool gemm_lowp_stores_faster(bool bf16_inputs);
// The forward product C(M,N) (fp32) = A(M,K) B(N,K)^T + e; only where gemm_lowp_fuses_epilogue().
template <class L>
void gemm_lowp_with_epilogue(int M, int N, int K, const L* A, int lda, const L* B, int ldb, float* C, int ldc,
                             const GemmEpilogue& e);

// Host: true makes every 16-bit GEMM take the converting path (benchmarks and tests compare them).
void gemm_lowp_force_convert(bool on);
// What does a bf16 / fp16 GEMM run on in this build: "oneDNN", "convert+BLAS" or "cuBLAS".
std::string gemm_lowp_backend(bool bf16_inputs);

// Set-up: the converting path's fp32 copies of A and B made for operands of up to `elems` values
// each (where a bf16 / fp16 GEMM converts), so that no step allocates. No-op elsewhere.
void gemm_lowp_reserve(bool bf16_inputs, size_t elems);
// Host BLAS threads for the oneDNN GEMMs (gemm_set_host_threads passes its count on).
void gemm_lowp_set_threads(int n);
// Frees the converting path's buffers (gemm_finalize calls it before Kokkos finalizes).
void gemm_lowp_finalize();

}  // namespace gpt2
