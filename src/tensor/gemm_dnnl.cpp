// oneDNN's matmul on the host (built when CMake finds oneDNN): the 16-bit GEMMs (bf16) and fp32's
// (gemm.cpp says which). oneDNN 2.6:
// a matmul primitive per shape, made once and cached (making one JIT-compiles a kernel) with its
// memory objects and scratchpad, so a call makes none of them (a small product's call costs a few
// us, which those allocations inflated by a fifth); row-major operands and transposes are strides of
// the memory descriptors; alpha is an output scale, beta a sum post-op, an epilogue's bias the
// matmul's bias argument and its residual a binary-add post-op. It runs on the OpenMP runtime
// with the thread count gemm_set_host_threads gave. Not thread-safe: a rank calls it from one thread.
#include <dnnl.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <omp.h>
#include <tuple>
#include <unordered_map>
#include <vector>

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

using Key = std::tuple<dt, int, int, int, int, int, int, int, int, float, float, int, int64_t, int64_t, int64_t, int>;
struct Cached {
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias, residual, scratch;  // handles pointed at each call's operands
  std::unordered_map<int, dnnl::memory> args;     // the same handles by argument: made once
  std::vector<unsigned char> scratch_bytes;
};

// A strided batch of GEMMs (batch 1: one GEMM, 2-D descriptors); matrix i starts at A + i*sA, likewise B, C.
struct Batch {
  int count = 1;
  int64_t a = 0, b = 0, c = 0;
};

// A matrix's descriptor: rows x cols with row stride ld (read transposed: strides swapped), batched.
dnnl::memory::desc matrix(dt type, int rows, int cols, int ld, bool transposed, int count, int64_t stride) {
  const dims strides = transposed ? dims{1, ld} : dims{ld, 1};
  if (count == 1) return dnnl::memory::desc({rows, cols}, type, strides);
  return dnnl::memory::desc({count, rows, cols}, type, dims{stride, strides[0], strides[1]});
}

// The post-ops: beta's sum, then the residual's add (a matrix of C's shape and strides).
dnnl::post_ops post_ops(float beta, bool residual, const dnnl::memory::desc& c) {
  dnnl::post_ops po;
  if (beta != 0.0f) po.append_sum(beta);
  if (residual) po.append_binary(dnnl::algorithm::binary_add, c);
  return po;
}
int residual_arg(float beta) {  // the residual's post-op index, after beta's sum if any
  return DNNL_ARG_ATTR_MULTIPLE_POST_OP(beta != 0.0f ? 1 : 0) | DNNL_ARG_SRC_1;
}

// in: the inputs' type (bf16 or f32); the output is f32. epilogue: bit 0 a bias, bit 1 a residual.
Cached& primitive(dt in, Op opA, Op opB, int M, int N, int K, float alpha, int lda, int ldb, float beta, int ldc,
                  const Batch& n, int epilogue) {
  static std::map<Key, Cached> cache;
  const Key key{in, int(opA), int(opB), M, N, K, lda, ldb, ldc, alpha, beta, n.count, n.a, n.b, n.c, epilogue};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // op(A) is (M,K): stored (M,K) with row stride lda, or (K,M) read transposed (strides swapped).
  const dnnl::memory::desc a = matrix(in, M, K, lda, opA == Op::T, n.count, n.a);
  const dnnl::memory::desc b = matrix(in, K, N, ldb, opB == Op::T, n.count, n.b);
  const dnnl::memory::desc c = matrix(dt::f32, M, N, ldc, false, n.count, n.c);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  attr.set_post_ops(post_ops(beta, epilogue & 2, c));
  const dnnl::memory::desc bias({1, N}, dt::f32, dims{N, 1});  // one a column, every row
  const dnnl::matmul::primitive_desc pd(
      (epilogue & 1) ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr, engine());
  Cached& made = cache[key];
  made.prim = dnnl::matmul(pd);
  made.a = dnnl::memory(a, engine(), nullptr), made.b = dnnl::memory(b, engine(), nullptr);
  made.c = dnnl::memory(c, engine(), nullptr);
  made.args = {{DNNL_ARG_SRC, made.a}, {DNNL_ARG_WEIGHTS, made.b}, {DNNL_ARG_DST, made.c}};
  if (epilogue & 1) made.bias = dnnl::memory(bias, engine(), nullptr), made.args[DNNL_ARG_BIAS] = made.bias;
  if (epilogue & 2) made.residual = dnnl::memory(c, engine(), nullptr), made.args[residual_arg(beta)] = made.residual;
  // 64-byte aligned, as the library aligns its own scratchpads.
  const size_t bytes = pd.scratchpad_desc().get_size();
  made.scratch_bytes.resize(bytes + 64);
  void* base = made.scratch_bytes.data();
  size_t room = made.scratch_bytes.size();
  made.scratch = dnnl::memory(pd.scratchpad_desc(), engine(), std::align(64, bytes, base, room));
  made.args[DNNL_ARG_SCRATCHPAD] = made.scratch;
  return made;
}

void run_one(dt in, Op opA, Op opB, int M, int N, int K, float alpha, const void* A, int lda, const void* B,
             int ldb, float beta, float* C, int ldc, const Batch& n, const GemmEpilogue& e) {
  const int epilogue = (e.bias ? 1 : 0) | (e.residual ? 2 : 0);
  Cached& p = primitive(in, opA, opB, M, N, K, alpha, lda, ldb, beta, ldc, n, epilogue);
  static dnnl::stream s(engine());
  p.a.set_data_handle(const_cast<void*>(A)), p.b.set_data_handle(const_cast<void*>(B)), p.c.set_data_handle(C);
  if (e.bias) p.bias.set_data_handle(const_cast<float*>(e.bias));
  if (e.residual) p.residual.set_data_handle(const_cast<float*>(e.residual));
  p.prim.execute(s, p.args);
  s.wait();
}

// A reduction long against the output (the LM head's input gradient, over the vocabulary) runs
// faster as a sum of calls over slices of K 4x the output's longer side than in one call: fp32
// 15-20%, bf16 14% (256 x 768 x 50304, AVX-512 BF16, 2 threads). A fixed order: the result does not
// depend on the threads.
constexpr int kSlicePerSide = 4;

void run(dt in, Op opA, Op opB, int M, int N, int K, float alpha, const void* A, int lda, const void* B, int ldb,
         float beta, float* C, int ldc, const Batch& n = {}, const GemmEpilogue& e = {}) {
  if (M == 0 || N == 0 || n.count == 0) return;
  if (g_threads > 0 && omp_get_max_threads() != g_threads) omp_set_num_threads(g_threads);
  const int slice = kSlicePerSide * std::max(M, N);
  const bool plain = opA == Op::N && opB == Op::N && n.count == 1 && !e.bias && !e.residual;
  if (!plain || K <= 2 * slice) return run_one(in, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, n, e);
  // Row-major, op(A) = A: A's columns and B's rows k0 .. k0+k are one slice of the reduction.
  const size_t bytes = in == dt::bf16 ? 2 : 4;
  const auto* a = static_cast<const unsigned char*>(A);
  const auto* b = static_cast<const unsigned char*>(B);
  for (int k0 = 0; k0 < K; k0 += slice)
    run_one(in, opA, opB, M, N, std::min(slice, K - k0), alpha, a + bytes * k0, lda, b + bytes * k0 * size_t(ldb),
            ldb, k0 ? 1.0f : beta, C, ldc, n, e);
}
}  // namespace

void dnnl_set_threads(int n) { g_threads = n; }

void dnnl_bf16_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
                    int ldb, float beta, float* C, int ldc, const GemmEpilogue& e) {
  run(dt::bf16, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {}, e);
}
void dnnl_f32_gemm(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                   int ldb, float beta, float* C, int ldc, const GemmEpilogue& e) {
  run(dt::f32, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {}, e);
}
void dnnl_f32_gemm_batched(Op opA, Op opB, int M, int N, int K, float alpha, const float* A, int lda, int64_t sA,
                           const float* B, int ldb, int64_t sB, float beta, float* C, int ldc, int64_t sC, int batch) {
  run(dt::f32, opA, opB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, Batch{batch, sA, sB, sC});
}

}  // namespace gpt2
