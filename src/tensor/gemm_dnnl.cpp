// oneDNN's matmul on the host (built when CMake finds oneDNN): the 16-bit GEMMs (bf16) and fp32's
// forward products. oneDNN 2.6:
// a matmul primitive per shape, made once and cached (making one JIT-compiles a kernel); row-major
// operands and transposes are strides of the memory descriptors; alpha is an output scale, beta a
// sum post-op. It runs on the OpenMP runtime with the thread count gemm_set_host_threads gave.
#include <dnnl.hpp>
#include <map>
#include <omp.h>
#include <tuple>

#include "tensor/gemm_dnnl.hpp"

namespace gpt2 {

namespace {
using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
int g_threads = 0;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

using Key = std::tuple<dt, int, int, int, int, int, int, int, int, float, float>;
struct Cached {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
};

// in: the inputs' type (bf16 or f32); the output is f32.
const Cached& primitive(dt in, Op opA, Op opB, int M, int N, int K, float alpha, int lda, int ldb, float beta, int ldc) {
  static std::map<Key, Cached> cache;
  const Key key{in, int(opA), int(opB), M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // op(A) is (M,K): stored (M,K) with row stride lda, or (K,M) read transposed (strides swapped).
  const dnnl::memory::desc a({M, K}, in, opA == Op::N ? dims{lda, 1} : dims{1, lda});
  const dnnl::memory::desc b({K, N}, in, opB == Op::N ? dims{ldb, 1} : dims{1, ldb});
  const dnnl::memory::desc c({M, N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  return cache.emplace(key, Cached{a, b, c, dnnl::matmul(pd)}).first->second;
}

void run(dt in, Op opA, Op opB, int M, int N, int K, float alpha, const void* A, int lda, const void* B, int ldb,
         float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (g_threads > 0 && omp_get_max_threads() != g_threads) omp_set_num_threads(g_threads);
  const Cached& p = primitive(in, opA, opB, M, N, K, alpha, lda, ldb, beta, ldc);
  dnnl::stream s(engine());
  dnnl::memory a(p.a, engine(), const_cast<void*>(A)), b(p.b, engine(), const_cast<void*>(B)), c(p.c, engine(), C);
  p.prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  s.wait();
}
}  // namespace

void dnnl_set_threads(int n) { g_threads = n; }

void dnnl_bf16_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                    int ldb, float beta, float* C, int ldc) {
  run(dt::bf16, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void dnnl_f32_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc) {
  run(dt::f32, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace gpt2
