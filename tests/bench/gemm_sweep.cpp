// Each GEMM shape of a training step timed standalone on the GPU: the call our dispatch makes
// (tensor/gemm.cpp, gemm_lowp.cpp: cublasSgemm / cublasGemmEx, CUBLAS_GEMM_DEFAULT) against
// cuBLASLt's heuristic candidates for the same problem (the fastest of the first --algos, timed, with
// a 64 MiB workspace), and against the same product with bf16 inputs and a bf16 output (what a step
// that kept its activations in bf16 would call). Inputs are random (never zeros: a product runs
// faster on zeros), the timings are medians of CUDA-event timed repetitions.
//
// Input (a file or stdin), one GEMM a line, as tests/bench/gpu_kernel_table.py writes them from the
// benchmark's per-operation table; row-major as gemm.hpp, batch >= 1, accumulate 0 | 1, in f32 | tf32 |
// bf16 | fp16, out f32:
//   opA opB M N K batch lda ldb ldc accumulate in out
// Output: one JSON object a line: the shape, then ms and TFLOP/s for "ours", "lt_best" (with the
// algorithm's index among the candidates), "bf16_out".
//
// Usage: gemm_sweep [FILE] [--algos 8] [--reps 20]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "gemm_sweep: %s\n", what.c_str());
  std::exit(1);
}
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void ck(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

struct Shape {
  char opA, opB;
  int M, N, K, batch, lda, ldb, ldc, accumulate;
  std::string in, out;
  double flops() const { return 2.0 * M * N * K * batch; }
  // Row-major extents of A, B and C: rows x ld each.
  size_t a_elems() const { return size_t(opA == 'N' ? M : K) * lda; }
  size_t b_elems() const { return size_t(opB == 'N' ? K : N) * ldb; }
  size_t c_elems() const { return size_t(M) * ldc; }
};

// Device memory with random values of the given element size (2: bf16 / fp16, 4: fp32), large enough
// for every operand of every shape.
struct Arena {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  void* work = nullptr;
  size_t work_bytes = size_t(64) << 20;
};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

void fill_random(void* dev, size_t n, bool half, uint64_t seed) {
  std::vector<float> h(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : h) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = float(int64_t(x >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // uniform in [-1, 1)
  }
  if (!half) return ck(cudaMemcpy(dev, h.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = to_bf16(h[i]);
  ck(cudaMemcpy(dev, b.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
}

template <class F>
double median_ms(F&& run, int reps) {
  cudaEvent_t e0, e1;
  ck(cudaEventCreate(&e0), "cudaEventCreate");
  ck(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) run();
  std::vector<float> t(size_t(reps), 0.0f);
  for (float& ms : t) {
    ck(cudaEventRecord(e0), "cudaEventRecord");
    run();
    ck(cudaEventRecord(e1), "cudaEventRecord");
    ck(cudaEventSynchronize(e1), "cudaEventSynchronize");
    ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

cublasOperation_t op(char o) { return o == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T; }
cudaDataType_t dtype(const std::string& s) {
  if (s == "bf16") return CUDA_R_16BF;
  if (s == "fp16") return CUDA_R_16F;
  return CUDA_R_32F;
}

// The call tensor/gemm.cpp / gemm_lowp.cpp makes (column-major: C^T = op(B)^T op(A)^T).
void ours(cublasHandle_t h, const Shape& s, const Arena& m) {
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  ck(cublasSetMathMode(h, s.in == "tf32" ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  const bool half = s.in == "bf16" || s.in == "fp16";
  if (s.batch == 1 && half) {
    ck(cublasGemmEx(h, op(s.opB), op(s.opA), s.N, s.M, s.K, &alpha, m.b, dtype(s.in), s.ldb, m.a, dtype(s.in), s.lda,
                    &beta, m.c, CUDA_R_32F, s.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
       "cublasGemmEx");
  } else if (s.batch == 1) {
    ck(cublasSgemm(h, op(s.opB), op(s.opA), s.N, s.M, s.K, &alpha, static_cast<const float*>(m.b), s.ldb,
                   static_cast<const float*>(m.a), s.lda, &beta, static_cast<float*>(m.c), s.ldc),
       "cublasSgemm");
  } else {
    ck(cublasSgemmStridedBatched(h, op(s.opB), op(s.opA), s.N, s.M, s.K, &alpha, static_cast<const float*>(m.b),
                                 s.ldb, int64_t(s.b_elems()), static_cast<const float*>(m.a), s.lda,
                                 int64_t(s.a_elems()), &beta, static_cast<float*>(m.c), s.ldc,
                                 int64_t(s.c_elems()), s.batch),
       "cublasSgemmStridedBatched");
  }
}

// cuBLASLt: the same problem with inputs `in` and output `out`; the heuristic's first `algos`
// candidates timed; returns the best time and its index (-1: no candidate).
struct LtResult {
  double ms = -1;
  int index = -1, candidates = 0;
};
cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, int ld, int batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  ck(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), int64_t(ld)), "LayoutCreate");
  if (batch > 1) {
    ck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch");
    ck(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
       "stride");
  }
  return l;
}
LtResult lt_best(cublasLtHandle_t lt, const Shape& s, const std::string& in, const std::string& out,
                 const Arena& m, int algos, int reps) {
  const cublasComputeType_t compute = in == "tf32" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc;
  ck(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t ta = op(s.opB), tb = op(s.opA);
  ck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  ck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  const cudaDataType_t ti = dtype(in), to = dtype(out);
  // Column-major view: the first operand is our B (N x K when not transposed), the second our A.
  auto la = layout(ti, ta == CUBLAS_OP_N ? s.N : s.K, ta == CUBLAS_OP_N ? s.K : s.N, s.ldb, s.batch,
                   int64_t(s.b_elems()));
  auto lb = layout(ti, tb == CUBLAS_OP_N ? s.K : s.M, tb == CUBLAS_OP_N ? s.M : s.K, s.lda, s.batch,
                   int64_t(s.a_elems()));
  auto lc = layout(to, s.N, s.M, s.ldc, s.batch, int64_t(s.c_elems()));
  cublasLtMatmulPreference_t pref;
  ck(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
  ck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &m.work_bytes,
                                          sizeof m.work_bytes),
     "workspace");
  std::vector<cublasLtMatmulHeuristicResult_t> cand(static_cast<size_t>(algos));
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, algos, cand.data(), &found);
  LtResult r;
  r.candidates = found;
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  for (int i = 0; i < found; ++i) {
    const auto run = [&] {
      ck(cublasLtMatmul(lt, desc, &alpha, m.b, la, m.a, lb, &beta, m.c, lc, m.c, lc, &cand[size_t(i)].algo, m.work,
                        m.work_bytes, nullptr),
         "cublasLtMatmul");
    };
    const double ms = median_ms(run, reps);
    if (r.ms < 0 || ms < r.ms) r.ms = ms, r.index = i;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return r;
}

std::vector<Shape> read_shapes(FILE* f) {
  std::vector<Shape> v;
  char opA[8], opB[8], in[16], out[16];
  Shape s{};
  while (std::fscanf(f, "%7s %7s %d %d %d %d %d %d %d %d %15s %15s", opA, opB, &s.M, &s.N, &s.K, &s.batch, &s.lda,
                     &s.ldb, &s.ldc, &s.accumulate, in, out) == 12) {
    s.opA = opA[0], s.opB = opB[0], s.in = in, s.out = out;
    if ((s.opA != 'N' && s.opA != 'T') || (s.opB != 'N' && s.opB != 'T') || s.M <= 0 || s.N <= 0 || s.K <= 0 ||
        s.batch <= 0)
      die("bad shape line (opA opB M N K batch lda ldb ldc accumulate in out expected)");
    v.push_back(s);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = nullptr;
  int algos = 8, reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--algos" && i + 1 < argc) algos = std::max(1, std::atoi(argv[++i]));
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "-h" || a == "--help") {
      std::printf("usage: gemm_sweep [FILE] [--algos 8] [--reps 20]\n"
                  "  FILE (or stdin): 'opA opB M N K batch lda ldb ldc accumulate in out' a line\n");
      return 0;
    } else if (!path) path = argv[i];
    else die("unexpected argument '" + a + "' (--help)");
  }
  FILE* f = path ? std::fopen(path, "r") : stdin;
  if (!f) die(std::string("cannot read ") + path);
  const std::vector<Shape> shapes = read_shapes(f);
  if (path) std::fclose(f);
  if (shapes.empty()) die("no GEMM shapes in the input");
  size_t a = 0, b = 0, c = 0;
  for (const Shape& s : shapes)
    a = std::max(a, s.a_elems() * s.batch), b = std::max(b, s.b_elems() * s.batch), c = std::max(c, s.c_elems() * s.batch);
  Arena m;
  ck(cudaMalloc(&m.a, a * 4), "cudaMalloc");
  ck(cudaMalloc(&m.b, b * 4), "cudaMalloc");
  ck(cudaMalloc(&m.c, c * 4), "cudaMalloc");
  ck(cudaMalloc(&m.work, m.work_bytes), "cudaMalloc");
  cublasHandle_t h;
  cublasLtHandle_t lt;
  ck(cublasCreate(&h), "cublasCreate");
  ck(cublasLtCreate(&lt), "cublasLtCreate");
  for (const Shape& s : shapes) {
    const bool half = s.in == "bf16" || s.in == "fp16";
    fill_random(m.a, s.a_elems() * s.batch, half, 1);
    fill_random(m.b, s.b_elems() * s.batch, half, 2);
    fill_random(m.c, s.c_elems() * s.batch, false, 3);
    const double t_ours = median_ms([&] { ours(h, s, m); }, reps);
    const LtResult best = lt_best(lt, s, s.in, s.out, m, algos, reps);
    fill_random(m.a, s.a_elems() * s.batch, true, 1);  // the same product in bf16, bf16 out
    fill_random(m.b, s.b_elems() * s.batch, true, 2);
    const LtResult b16 = lt_best(lt, s, "bf16", "bf16", m, algos, reps);
    const auto tf = [&](double ms) { return ms > 0 ? s.flops() / (ms * 1e-3) / 1e12 : 0.0; };
    std::printf("{\"opA\": \"%c\", \"opB\": \"%c\", \"M\": %d, \"N\": %d, \"K\": %d, \"batch\": %d, \"lda\": %d, "
                "\"ldb\": %d, \"ldc\": %d, \"accumulate\": %d, \"in\": \"%s\", \"out\": \"%s\", "
                "\"ours_ms\": %.5f, \"ours_tflops\": %.1f, \"lt_best_ms\": %.5f, \"lt_best_tflops\": %.1f, "
                "\"lt_best_index\": %d, \"lt_candidates\": %d, \"bf16_out_ms\": %.5f, \"bf16_out_tflops\": %.1f}\n",
                s.opA, s.opB, s.M, s.N, s.K, s.batch, s.lda, s.ldb, s.ldc, s.accumulate, s.in.c_str(), s.out.c_str(),
                t_ours, tf(t_ours), best.ms, tf(best.ms), best.index, best.candidates, b16.ms, tf(b16.ms));
    std::fflush(stdout);
  }
  cublasLtDestroy(lt);
  cublasDestroy(h);
  cudaFree(m.a), cudaFree(m.b), cudaFree(m.c), cudaFree(m.work);
  return 0;
}
