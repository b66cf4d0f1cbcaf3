#include "tensor/gemm.hpp"

#include "tensor/device_work.hpp"
#include "tensor/traffic.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "tensor/gemm_lowp.hpp"
#if defined(GPT2_HAVE_ONEDNN)
#include "tensor/gemm_dnnl.hpp"
#endif

#if defined(KOKKOS_ENABLE_CUDA)
#include <cublas_v2.h>

#include "tensor/gemm_lt.hpp"
#else
#include <cblas.h>
#endif

namespace gpt2 {

#if defined(KOKKOS_ENABLE_CUDA)

namespace {
cublasHandle_t g_handle = nullptr;
bool g_tf32 = false;

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS ", what, " failed with status ", int(s));
}

}  // namespace

namespace detail {
// Shared with gemm_lowp.cpp's 16-bit GEMMs.
cublasHandle_t cublas_handle() {
  if (!g_handle) {
    check(cublasCreate(&g_handle), "cublasCreate");
    check(cublasSetMathMode(g_handle, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
  }
  // Kokkos' default instance stream: GEMMs stay ordered with the kernels before and after them.
  check(cublasSetStream(g_handle, Kokkos::Cuda().cuda_stream()), "cublasSetStream");
  return g_handle;
}
}  // namespace detail

namespace {
cublasHandle_t handle() { return detail::cublas_handle(); }

cublasOperation_t op(Op o) { return o == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T; }
}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
template <>
void gemm<float>(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const char* dt = g_tf32 ? "tf32" : "f32";
  const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, dt, dt});
  check(cublasSgemm(handle(), op(opB), op(opA), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc),
        "Sgemm");
}
template <>
void gemm<double>(Op opA, Op opB, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, "f64", "f64"});
  check(cublasDgemm(handle(), op(opB), op(opA), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc),
        "Dgemm");
}
// One strided-batched call a group, each on the stream after the one before.
template <>
void gemm_strided_batched<float>(Op opA, Op opB, int M, int N, int K, float alpha, const float* A,
                                 int lda, int64_t sA, const float* B, int ldb, int64_t sB,
                                 float beta, float* C, int ldc, int64_t sC, int batch, const GemmGroups& g) {
  const char* dt = g_tf32 ? "tf32" : "f32";
  for (int i = 0; i < g.count; ++i) {
    const GemmScope scope({opA, opB, M, N, K, batch, lda, ldb, ldc, beta != 0, dt, dt});
    check(cublasSgemmStridedBatched(handle(), op(opB), op(opA), N, M, K, &alpha, B + i * g.B, ldb, sB, A + i * g.A,
                                    lda, sA, &beta, C + i * g.C, ldc, sC, batch),
          "SgemmStridedBatched");
  }
}
template <>
void gemm_strided_batched<double>(Op opA, Op opB, int M, int N, int K, double alpha,
                                  const double* A, int lda, int64_t sA, const double* B, int ldb,
                                  int64_t sB, double beta, double* C, int ldc, int64_t sC,
                                  int batch, const GemmGroups& g) {
  for (int i = 0; i < g.count; ++i) {
    const GemmScope scope({opA, opB, M, N, K, batch, lda, ldb, ldc, beta != 0, "f64", "f64"});
    check(cublasDgemmStridedBatched(handle(), op(opB), op(opA), N, M, K, &alpha, B + i * g.B, ldb, sB, A + i * g.A,
                                    lda, sA, &beta, C + i * g.C, ldc, sC, batch),
          "DgemmStridedBatched");
  }
}

void gemm_set_tf32(bool on) {
  g_tf32 = on;
  if (g_handle)
    check(cublasSetMathMode(g_handle, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
          "cublasSetMathMode");
}
bool gemm_fuses_epilogue() { return true; }  // (cuBLASLt's bias epilogue, its C the residual)
bool gemm_stores_faster() { return true; }
void gemm_with_epilogue(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                        const GemmEpilogue& e) {
  const GemmScope scope({Op::N, Op::T, M, N, K, 1, lda, ldb, ldc, false, g_tf32 ? "tf32" : "f32", "f32"});
  count_epilogue(M, N, e);
  detail::lt_gemm_epilogue(CUDA_R_32F, g_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, M, N, K, A, lda, B,
                           ldb, C, ldc, e);
}
void gemm_set_host_f32(HostGemm) {}
std::string gemm_host_f32_backend() { return "cuBLAS"; }
void gemm_set_host_threads(int) {}
int gemm_host_threads() { return 0; }
void gemm_prepare() {
  handle();
  detail::lt_prepare();
}
void gemm_finalize() {
  gemm_lowp_finalize();
  detail::lt_finalize();
  if (g_handle) cublasDestroy(g_handle);
  g_handle = nullptr;
}

#else  // host BLAS

namespace {
HostGemm g_f32_backend = HostGemm::automatic;
// Where oneDNN's f32 matmul measured faster than OpenBLAS's sgemm at GPT-2's shapes (2 threads,
// AVX-512; README, Performance): x * w^T (every forward product, 1-28%) and dY * W (input gradients,
// 7-45%); dY^T * X (weight gradients) was 3-10% slower everywhere.
// Unless OpenBLAS runs below the CPU: it picks kernels by the CPU models it knows, and on a newer one
// (0.3.21 knows no Sapphire or Emerald Rapids) falls back to Prescott's SSE3 kernels, 2-3x slower than
// oneDNN's, which JIT for the instructions they find: then oneDNN takes every product.
bool openblas_below_cpu() {
  static const bool below = [] {
    std::string core = openblas_get_corename();
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    for (const char* wide : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"})
      if (core == wide) return false;
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return below;
}
// Whether oneDNN takes a product the automatic choice gives it when `faster` (gemm_set_host_f32).
bool on_dnnl(bool faster) {
  return g_f32_backend == HostGemm::onednn || (g_f32_backend == HostGemm::automatic && faster);
}
CBLAS_TRANSPOSE op(Op o) { return o == Op::N ? CblasNoTrans : CblasTrans; }
// OpenBLAS's OpenMP build (linked with the OpenMP Kokkos) ignores OPENBLAS_NUM_THREADS and follows
// omp_get_max_threads(): honour the variable before the first GEMM, as its pthreads build does, so a
// process that never calls gemm_set_host_threads (the kernel tests) gets the count it asked for.
// Kokkos is unaffected: its parallel regions name their thread count.
void blas_threads_from_environment() {
  static const bool applied = [] {
    const char* e = std::getenv("OPENBLAS_NUM_THREADS");
    if (e && std::atoi(e) > 0) openblas_set_num_threads(std::atoi(e));
    return true;
  }();
  (void)applied;
}

void blas_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, op(opA), op(opB), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void blas_gemm(Op opA, Op opB, int M, int N, int K, double alpha, const double* A, int lda, const double* B, int ldb,
               double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, op(opA), op(opB), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

template <>
void gemm<float>(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, "f32", "f32"});
  blas_threads_from_environment();
#if defined(GPT2_HAVE_ONEDNN)
  if (on_dnnl(opA == Op::N || openblas_below_cpu()))
    return dnnl_f32_gemm(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  blas_gemm(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <>
void gemm<double>(Op opA, Op opB, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  const GemmScope scope({opA, opB, M, N, K, 1, lda, ldb, ldc, beta != 0, "f64", "f64"});
  blas_threads_from_environment();
  blas_gemm(opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
bool gemm_fuses_epilogue() {
#if defined(GPT2_HAVE_ONEDNN)
  return on_dnnl(true);  // (a forward product is never sliced: its reduction is the model's width)
#else
  return false;
#endif
}
bool gemm_stores_faster() {
#if defined(GPT2_HAVE_ONEDNN)
  return on_dnnl(openblas_below_cpu());  // where gemm<float> sends a weight gradient
#else
  return false;
#endif
}
void gemm_with_epilogue(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                        const GemmEpilogue& e) {
  if (!gemm_fuses_epilogue()) fail("gemm_with_epilogue: this build's products add no epilogue (gemm_fuses_epilogue)");
  const GemmScope scope({Op::N, Op::T, M, N, K, 1, lda, ldb, ldc, false, "f32", "f32"});
  count_epilogue(M, N, e);
#if defined(GPT2_HAVE_ONEDNN)
  dnnl_f32_gemm(Op::N, Op::T, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, e);
#endif
}
// Attention's small per-head GEMMs: every group's batch shared out over the host threads at once,
// each GEMM on one (inside a parallel region OpenBLAS's OpenMP build runs single-threaded). One call
// each, one after another, spent more time starting the library's threads than multiplying at T = 64;
// a parallel region a group (a sequence's 12 heads) ran 1.1-1.3x the time of one for all of them.
// fp32 on oneDNN (only where OpenBLAS runs below the CPU, unless forced): a primitive a group.
template <class T>
void gemm_strided_batched(Op opA, Op opB, int M, int N, int K, T alpha, const T* A, int lda,
                          int64_t sA, const T* B, int ldb, int64_t sB, T beta, T* C, int ldc,
                          int64_t sC, int batch, const GemmGroups& g) {
  const char* dt = std::is_same_v<T, double> ? "f64" : "f32";
  const GemmScope scope({opA, opB, M, N, K, batch * g.count, lda, ldb, ldc, beta != 0, dt, dt});
  blas_threads_from_environment();
#if defined(GPT2_HAVE_ONEDNN)
  if constexpr (std::is_same_v<T, float>)
    if (on_dnnl(openblas_below_cpu())) {
      for (int i = 0; i < g.count; ++i)
        dnnl_f32_gemm_batched(opA, opB, M, N, K, alpha, A + i * g.A, lda, sA, B + i * g.B, ldb, sB, beta,
                              C + i * g.C, ldc, sC, batch);
      return;
    }
#endif
  Kokkos::parallel_for(
      "gemm_batched", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, batch * g.count), [=](int j) {
        const int64_t group = j / batch, i = j % batch;
        blas_gemm(opA, opB, M, N, K, alpha, A + group * g.A + i * sA, lda, B + group * g.B + i * sB, ldb, beta,
                  C + group * g.C + i * sC, ldc);
      });  // (done on return: Kokkos' host backends run a kernel to its end before returning)
}
template void gemm_strided_batched<float>(Op, Op, int, int, int, float, const float*, int, int64_t,
                                          const float*, int, int64_t, float, float*, int, int64_t,
                                          int, const GemmGroups&);
template void gemm_strided_batched<double>(Op, Op, int, int, int, double, const double*, int,
                                           int64_t, const double*, int, int64_t, double, double*,
                                           int, int64_t, int, const GemmGroups&);

void gemm_set_tf32(bool) {}
void gemm_set_host_f32(HostGemm b) { g_f32_backend = b; }
std::string gemm_host_f32_backend() {
#if defined(GPT2_HAVE_ONEDNN)
  if (g_f32_backend == HostGemm::onednn) return "oneDNN";
  if (on_dnnl(openblas_below_cpu()))
    return std::string("oneDNN (OpenBLAS's kernels, ") + openblas_get_corename() + ", are below this CPU)";
  if (g_f32_backend != HostGemm::openblas) return "oneDNN for x*w^T and dY*W, OpenBLAS for the rest";
#endif
  return "OpenBLAS";
}
void gemm_set_host_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
  gemm_lowp_set_threads(n);
}
int gemm_host_threads() { return openblas_get_num_threads(); }
void gemm_prepare() {}
void gemm_finalize() { gemm_lowp_finalize(); }

#endif

namespace {
GemmObserver g_observer = nullptr;
uint64_t dtype_bytes(const char* name) {  // "f64", "f32"/"tf32", else a 16-bit type
  return std::strstr(name, "64") ? 8 : std::strstr(name, "32") ? 4 : 2;
}
}  // namespace
void set_gemm_observer(GemmObserver f) { g_observer = f; }
void count_epilogue(int M, int N, const GemmEpilogue& e) {
  count_traffic((e.bias ? uint64_t(N) : 0) * sizeof(float) + (e.residual ? uint64_t(M) * N : 0) * sizeof(float), 0);
}
GemmScope::GemmScope(const GemmCall& call) : call_(call) {
  device_work();
  // The operands read once and the output written (and read when accumulated into).
  const uint64_t batch = uint64_t(call.batch), out = batch * uint64_t(call.M) * uint64_t(call.N) * dtype_bytes(call.out);
  count_traffic(batch * (uint64_t(call.M) + uint64_t(call.N)) * uint64_t(call.K) * dtype_bytes(call.in) +
                    (call.accumulate ? out : 0),
                out);
  if (g_observer) g_observer(call_, false);
}
GemmScope::~GemmScope() {
  if (g_observer) g_observer(call_, true);
}

}  // namespace gpt2
