// cuBLASLt's forward products with their epilogue (gemm_lt.hpp). Row-major C = A B^T is column-major
// C^T = B^T A: the library's first operand is our B (stored K x N, transposed), its second our A
// (stored K x M), its D our C (N x M). Its bias epilogue adds a vector along D's rows, one value an
// output feature; the residual is its C operand with beta 1 (C and D share one layout, so the
// residual may also be the output itself). No workspace: the products of a step are large enough
// without split-K, and a workspace would be a device allocation at the first product, in a step.
#include "tensor/gemm_lt.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <tuple>

#include <Kokkos_Core.hpp>
#include <cublas_v2.h>

#include "core/error.hpp"
#include "tensor/matmul.hpp"

namespace gpt2::detail {

cublasHandle_t cublas_handle();  // gemm.cpp: on Kokkos' stream

namespace {
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt ", what, " failed with status ", int(s));
}

cublasLtHandle_t g_handle = nullptr;
cublasLtHandle_t handle() {
  if (!g_handle) check(cublasLtCreate(&g_handle), "cublasLtCreate");
  return g_handle;
}

// The largest power of two, up to 256, that divides the address: the heuristic picks algorithms
// whose loads fit the operands as they are (its default assumes 256-byte alignment).
uint32_t alignment(const void* p) {
  const auto a = uint32_t(reinterpret_cast<uintptr_t>(p) & 255u);
  return a == 0 ? 256u : a & (~a + 1u);
}

// in, compute, M, N, K, lda, ldb, ldc, bias?, residual?, alignment of A, B, C (and D), bias
using Key = std::tuple<int, int, int, int, int, int, int, int, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t>;
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};
std::map<Key, Plan>& plans() {
  static std::map<Key, Plan> p;
  return p;
}

cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t l;
  check(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), int64_t(ld)), "MatrixLayoutCreate");
  return l;
}

template <class V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t what, const V& v, const char* name) {
  check(cublasLtMatmulDescSetAttribute(d, what, &v, sizeof v), name);
}

// The plan for a product of M x N x K with leading dimensions lda, ldb, ldc, operands aligned to al_a,
// al_b and al_c bytes (C and the residual), and the epilogue's bias (its pointer's alignment counts).
Plan make_plan(cudaDataType_t in, cublasComputeType_t compute, int M, int N, int K, int lda, int ldb, int ldc,
               uint32_t al_a, uint32_t al_b, uint32_t al_c, const GemmEpilogue& e) {
  const bool has_bias = e.bias != nullptr, has_residual = e.residual != nullptr;
  Plan p;
  check(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "MatmulDescCreate");
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "TRANSA");
  set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "TRANSB");
  set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
      "EPILOGUE");
  if (has_bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(e.bias), "BIAS_POINTER");
  p.a = layout(in, K, N, ldb);
  p.b = layout(in, K, M, lda);
  p.d = layout(CUDA_R_32F, N, M, ldc);
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "MatmulPreferenceCreate");
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t what, auto v, const char* name) {
    check(cublasLtMatmulPreferenceSetAttribute(pref, what, &v, sizeof v), name);
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(0), "MAX_WORKSPACE_BYTES");
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_b, "MIN_ALIGNMENT_A_BYTES");  // (its A is our B)
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_a, "MIN_ALIGNMENT_B_BYTES");
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c, "MIN_ALIGNMENT_C_BYTES");
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_c, "MIN_ALIGNMENT_D_BYTES");
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle(), p.desc, p.a, p.b, p.d, p.d, pref, 1, &best, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.found = s == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.found) p.algo = best.algo;
  else
    std::fprintf(stderr,
                 "[gemm] cuBLASLt has no algorithm for the product %d x %d x %d with its %s%s%s epilogue: "
                 "cuBLAS multiplies and a pass adds it\n",
                 M, N, K, has_bias ? "bias" : "", has_bias && has_residual ? " and " : "",
                 has_residual ? "residual" : "");
  return p;
}

// Where cuBLASLt has no algorithm: the plain product (cuBLAS), then one pass for the bias and residual.
void unfused(cudaDataType_t in, cublasComputeType_t compute, int M, int N, int K, const void* A, int lda,
             const void* B, int ldb, float* C, int ldc, const GemmEpilogue& e) {
  if (ldc != N) fail("gemm_with_epilogue: an output with row stride ", ldc, " != its ", N, " columns");
  const bool in_place = e.residual == C;  // (the residual already in C: the product adds to it)
  const float alpha = 1.0f, beta = in_place ? 1.0f : 0.0f;
  check(cublasGemmEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, in, ldb, A, in, lda, &beta, C,
                     CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT),
        "(cuBLAS) GemmEx");
  add_bias_residual<float>(Mat<float>(C, M, N), e.bias ? CVec<float>(e.bias, N) : CVec<float>(),
                           e.residual && !in_place ? CMat<float>(e.residual, M, N) : CMat<float>());
}
}  // namespace

void lt_gemm_epilogue(cudaDataType_t in, cublasComputeType_t compute, int M, int N, int K, const void* A, int lda,
                      const void* B, int ldb, float* C, int ldc, const GemmEpilogue& e) {
  const bool has_bias = e.bias != nullptr, has_residual = e.residual != nullptr;
  const uint32_t al_a = alignment(A), al_b = alignment(B),
                 al_c = has_residual ? std::min(alignment(C), alignment(e.residual)) : alignment(C);
  const Key k{int(in), int(compute), M, N, K, lda, ldb, ldc, has_bias, has_residual, al_a, al_b, al_c,
              has_bias ? alignment(e.bias) : 0u};
  auto it = plans().find(k);
  if (it == plans().end())
    it = plans().emplace(k, make_plan(in, compute, M, N, K, lda, ldb, ldc, al_a, al_b, al_c, e)).first;
  const Plan& p = it->second;
  if (!p.found) return unfused(in, compute, M, N, K, A, lda, B, ldb, C, ldc, e);
  if (has_bias) set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(e.bias), "BIAS_POINTER");
  const float alpha = 1.0f, beta = has_residual ? 1.0f : 0.0f;
  const void* c_in = has_residual ? static_cast<const void*>(e.residual) : C;
  check(cublasLtMatmul(handle(), p.desc, &alpha, B, p.a, A, p.b, &beta, c_in, p.d, C, p.d, &p.algo, nullptr, 0,
                       Kokkos::Cuda().cuda_stream()),
        "Matmul");
}

void lt_prepare() { handle(); }

void lt_finalize() {
  for (auto& entry : plans()) {
    const Plan& p = entry.second;
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  plans().clear();
  if (g_handle) cublasLtDestroy(g_handle);
  g_handle = nullptr;
}

}  // namespace gpt2::detail
