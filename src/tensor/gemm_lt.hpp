#pragma once
// cuBLASLt on CUDA: the forward products with their epilogue inside the library's call (gemm.hpp's
// GemmEpilogue, as oneDNN does on the host):
//   C(M,N) (fp32) = A(M,K) B(N,K)^T + bias (N) + residual (M,N, row stride ldc)
// A and B fp32 (TF32 where the compute type says), bf16 or fp16; row-major as gemm.hpp. Built only
// with CUDA; gemm.cpp and gemm_lowp.cpp call it.
#include <cublasLt.h>

#include "tensor/gemm.hpp"

namespace gpt2::detail {

// Issues the product on Kokkos' stream (ordered with the kernels around it). A plan (descriptors and
// the heuristic's algorithm) is made for each shape, operand type and pointer alignment the first
// time it is met, then reused. Where cuBLASLt offers no algorithm for the epilogue, the product goes
// to cuBLAS and the bias and residual are added in a pass after it (said on stderr, once a shape).
void lt_gemm_epilogue(cudaDataType_t in, cublasComputeType_t compute, int M, int N, int K, const void* A, int lda,
                      const void* B, int ldb, float* C, int ldc, const GemmEpilogue& e);

// Makes the handle (gemm_prepare), if not yet made.
void lt_prepare();
// Frees the plans and the handle (gemm_finalize).
void lt_finalize();

}  // namespace gpt2::detail
