#pragma once
// GEMM dispatch to the execution space's vendor BLAS: OpenBLAS cblas (and oneDNN's matmul for the
// forward products and most input gradients) on the host, cuBLAS on CUDA (cuBLASLt for a forward
// product with its epilogue), on Kokkos' own stream, so it is ordered with the kernels around it.
// All matrices are row-major with explicit leading dimensions:
//   C(M,N) = alpha * op(A) * op(B) + beta * C,   op(A) is (M,K), op(B) is (K,N).
#include <cstdint>
#include <string>

namespace gpt2 {

enum class Op { N, T };

template <class T>
void gemm(Op opA, Op opB, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc);

// A forward product's epilogue: C(M,N) = op(A) op(B) + bias (N: one a column, added to every row)
// + residual (M,N, row stride ldc), added inside the library's call; either may be null.
struct GemmEpilogue {
  const float* bias = nullptr;
  const float* residual = nullptr;
};
// Whether this build's fp32 forward products apply an epilogue inside the library's call (oneDNN on
// the host, cuBLASLt on CUDA); where not, the caller adds the bias and residual in a pass of its own.
bool gemm_fuses_epilogue();
// Whether this build's fp32 weight-gradient product (op(A) = A^T) storing its sum (beta 0) is faster
// than adding it to zeros (beta 1): where the library then skips reading C (oneDNN, cuBLAS), not
// where it first zeroes C in a pass of its own (OpenBLAS).
bool gemm_stores_faster();
// The forward product C(M,N) = A(M,K) B(N,K)^T + e (x * w^T); only where gemm_fuses_epilogue().
void gemm_with_epilogue(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                        const GemmEpilogue& e);

// A second level of batching: `count` groups of the batch, group g's matrices g*A (B, C) further on
// (attention's heads are the batch, its sequences the groups: no one stride steps through both).
struct GemmGroups {
  int count = 1;
  int64_t A = 0, B = 0, C = 0;
};

// `batch` independent GEMMs (in each of groups.count groups); matrix i of group g starts at
// A + g*groups.A + i*strideA (likewise B, C). The host shares every group's GEMMs out over its
// threads at once; cuBLAS takes a strided-batched call a group.
template <class T>
void gemm_strided_batched(Op opA, Op opB, int M, int N, int K, T alpha, const T* A, int lda,
                          int64_t strideA, const T* B, int ldb, int64_t strideB, T beta, T* C,
                          int ldc, int64_t strideC, int batch, const GemmGroups& groups = {});

// Which library multiplies fp32 on the host: automatic (oneDNN for x*w^T and dY*W where the build has it
// -- every product when OpenBLAS's kernels are below the CPU --, OpenBLAS otherwise), or one library for
// everything (benchmarks and tests compare them; onednn: OpenBLAS where the build has no oneDNN).
// Ignored on CUDA.
enum class HostGemm { automatic, openblas, onednn };
void gemm_set_host_f32(HostGemm b);
std::string gemm_host_f32_backend();  // what this build uses, in words

// TF32 tensor-core math for fp32 GEMMs on CUDA (ignored on the host). Off by default.
void gemm_set_tf32(bool on);

// Host BLAS threads for this process (ignored on CUDA). 0 leaves the library default.
void gemm_set_host_threads(int n);
int gemm_host_threads();

// Makes the library handles (cuBLAS, cuBLASLt) now, at set-up: making one allocates device memory
// and waits for the device, which the first product would otherwise do inside step 1. No-op on the
// host. Products made without it (kernel tests) make their handles on first use.
void gemm_prepare();
// Releases library handles (cuBLAS, cuBLASLt); called before Kokkos finalizes.
void gemm_finalize();

// ---- observing the library calls (the benchmarks' per-operation tables) ---------------------------
// One library call as issued: C(M,N) = op(A) op(B) [+ C where accumulate], `batch` of them, inputs of
// dtype `in` ("f32", "tf32": fp32 on TF32 tensor cores, "bf16", "fp16", "f64") into `out`.
struct GemmCall {
  Op opA, opB;
  int M, N, K, batch, lda, ldb, ldc;
  bool accumulate;
  const char* in;
  const char* out;
};
// Called just before (issued = false) and just after (true) each call is issued to the library.
using GemmObserver = void (*)(const GemmCall& call, bool issued);
void set_gemm_observer(GemmObserver f);  // nullptr: none (the default)

// Every dispatch wraps its library call in one: announces the device work (device_work.hpp), then
// tells the observer, if any.
class GemmScope {
 public:
  explicit GemmScope(const GemmCall& call);
  ~GemmScope();
  GemmScope(const GemmScope&) = delete;
  GemmScope& operator=(const GemmScope&) = delete;

 private:
  GemmCall call_;
};

// The bytes an epilogue reads (its bias and residual), counted by the product that adds it.
void count_epilogue(int M, int N, const GemmEpilogue& e);

}  // namespace gpt2
