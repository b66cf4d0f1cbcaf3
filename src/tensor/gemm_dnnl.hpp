#pragma once
// oneDNN's matmul on the host (gemm_dnnl.cpp, built when CMake finds oneDNN): row-major as gemm.hpp,
// fp32 output; gemm.cpp and gemm_lowp.cpp dispatch to it.
#include <cstdint>

#include "tensor/gemm.hpp"
#include "tensor/half.hpp"

namespace gpt2 {

// e: a bias and a residual added in the same call (gemm.hpp's GemmEpilogue), after beta's sum.
void dnnl_bf16_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                    int ldb, float beta, float* C, int ldc, const GemmEpilogue& e = {});
void dnnl_f32_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc, const GemmEpilogue& e = {});
// A strided batch (attention's per-head products) in one primitive: matrix i at A + i*sA, likewise B, C.
void dnnl_f32_gemm_batched(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, int64_t sA,
                           const float* B, int ldb, int64_t sB, float beta, float* C, int ldc, int64_t sC, int batch);
void dnnl_set_threads(int n);  // the OpenMP threads its primitives run on

}  // namespace gpt2
