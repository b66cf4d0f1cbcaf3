#include "step_profile.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "tensor/gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace gpt2::bench {

namespace {

using Clock = std::chrono::steady_clock;
#if defined(KOKKOS_ENABLE_CUDA)
constexpr const char* kTimedBy = "CUDA events on Kokkos' stream";
#else
constexpr const char* kTimedBy = "a fence and the host clock around each operation";
#endif

// One operation's name and, for a GEMM, what the library was asked for.
struct OpKind {
  std::string name;
  bool gemm = false;
  GemmCall call{};
  double ms = 0, idle_before_ms = 0;
  long calls = 0;
};

// One issued operation: its kind and its start / end marks (event pair or clock readings).
struct Mark {
  int kind;
#if defined(KOKKOS_ENABLE_CUDA)
  cudaEvent_t begin, end;
#else
  Clock::time_point begin, end;
#endif
};

struct Profile {
  std::map<std::string, int> ids;
  std::vector<OpKind> kinds;
  std::vector<Mark> marks;
  size_t used = 0, dropped = 0;
  int open = -1;   // the mark of the operation being issued
  int depth = 0;   // operations inside it (the host's batched GEMM is a Kokkos kernel): its time
};
Profile* g = nullptr;

std::string gemm_name(const GemmCall& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "gemm %c%c %dx%dx%d%s %s>%s%s", c.opA == Op::N ? 'N' : 'T',
                c.opB == Op::N ? 'N' : 'T', c.M, c.N, c.K,
                c.batch > 1 ? (" x" + std::to_string(c.batch)).c_str() : "", c.in, c.out,
                c.accumulate ? " +=" : "");
  return buf;
}

int kind_of(const std::string& name, const GemmCall* call) {
  auto [it, added] = g->ids.emplace(name, int(g->kinds.size()));
  if (added) {
    OpKind k;
    k.name = name;
    if (call) k.gemm = true, k.call = *call;
    g->kinds.push_back(k);
  }
  return it->second;
}

void begin(const std::string& name, const GemmCall* call) {
  if (g->depth++ > 0) return;
  if (g->used == g->marks.size()) {
    ++g->dropped;
    g->open = -1;
    return;
  }
  Mark& m = g->marks[g->used];
  m.kind = kind_of(name, call);
  g->open = int(g->used++);
#if defined(KOKKOS_ENABLE_CUDA)
  nvtxRangePushA(name.c_str());
  cudaEventRecord(m.begin, Kokkos::Cuda().cuda_stream());
#else
  Kokkos::fence();
  m.begin = Clock::now();
#endif
}

void end() {
  if (--g->depth > 0 || g->open < 0) return;
  Mark& m = g->marks[size_t(g->open)];
#if defined(KOKKOS_ENABLE_CUDA)
  cudaEventRecord(m.end, Kokkos::Cuda().cuda_stream());
  nvtxRangePop();
#else
  Kokkos::fence();
  m.end = Clock::now();
#endif
  g->open = -1;
}

void on_kernel_begin(const char* name, const uint32_t, uint64_t* id) {
  *id = 0;
  begin(name, nullptr);
}
void on_kernel_end(uint64_t) { end(); }
void on_gemm(const GemmCall& call, bool issued) {
  if (issued) return end();
  begin(gemm_name(call), &call);
}

void install(bool on) {
  namespace KT = Kokkos::Tools::Experimental;
  KT::set_begin_parallel_for_callback(on ? on_kernel_begin : nullptr);
  KT::set_end_parallel_for_callback(on ? on_kernel_end : nullptr);
  KT::set_begin_parallel_reduce_callback(on ? on_kernel_begin : nullptr);
  KT::set_end_parallel_reduce_callback(on ? on_kernel_end : nullptr);
  KT::set_begin_parallel_scan_callback(on ? on_kernel_begin : nullptr);
  KT::set_end_parallel_scan_callback(on ? on_kernel_end : nullptr);
  set_gemm_observer(on ? on_gemm : nullptr);
}

double elapsed_ms(const Mark& a, bool a_end, const Mark& b, bool b_end) {
#if defined(KOKKOS_ENABLE_CUDA)
  float ms = 0;
  cudaEventElapsedTime(&ms, a_end ? a.end : a.begin, b_end ? b.end : b.begin);
  return ms;
#else
  return std::chrono::duration<double, std::milli>((b_end ? b.end : b.begin) - (a_end ? a.end : a.begin)).count();
#endif
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

void write_json(FILE* f, const Profile& p, int steps, double span_ms, const std::string& context) {
  double busy = 0, idle = 0;
  for (const OpKind& k : p.kinds) busy += k.ms, idle += k.idle_before_ms;
  std::fprintf(f, "{\"execution_space\": \"%s\", %s\"profiled_steps\": %d, \"span_ms_per_step\": %.6f,\n",
               Kokkos::DefaultExecutionSpace::name(), context.c_str(), steps, span_ms / steps);
  std::fprintf(f, " \"busy_ms_per_step\": %.6f, \"idle_between_ms_per_step\": %.6f, \"dropped\": %zu,\n",
               busy / steps, idle / steps, p.dropped);
  std::fprintf(f, " \"timed_by\": \"%s\",\n \"ops\": [", kTimedBy);
  for (size_t i = 0; i < p.kinds.size(); ++i) {
    const OpKind& k = p.kinds[i];
    std::fprintf(f, "%s\n  {\"name\": \"%s\", \"calls_per_step\": %.3f, \"ms_per_step\": %.6f, \"idle_before_ms_per_step\": %.6f",
                 i ? "," : "", json_escape(k.name).c_str(), double(k.calls) / steps, k.ms / steps,
                 k.idle_before_ms / steps);
    if (k.gemm) {
      const GemmCall& c = k.call;
      std::fprintf(f, ", \"gemm\": {\"opA\": \"%c\", \"opB\": \"%c\", \"M\": %d, \"N\": %d, \"K\": %d, \"batch\": %d, "
                   "\"lda\": %d, \"ldb\": %d, \"ldc\": %d, \"accumulate\": %s, \"in\": \"%s\", \"out\": \"%s\"}",
                   c.opA == Op::N ? 'N' : 'T', c.opB == Op::N ? 'N' : 'T', c.M, c.N, c.K, c.batch, c.lda, c.ldb,
                   c.ldc, c.accumulate ? "true" : "false", c.in, c.out);
    }
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n ]}\n");
}

}  // namespace

void profile_steps(const char* path, int steps, const std::string& context, void (*step)(void*), void* arg) {
  Profile p;
  p.marks.resize(size_t(steps) * 4096);
#if defined(KOKKOS_ENABLE_CUDA)
  for (Mark& m : p.marks) cudaEventCreate(&m.begin), cudaEventCreate(&m.end);
#endif
  g = &p;
  Kokkos::fence();
  install(true);
#if defined(KOKKOS_ENABLE_CUDA)
  cudaProfilerStart();  // a kernel profiler started with --profile-from-start off sees these steps alone
#endif
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step(arg);
  Kokkos::fence();
#if defined(KOKKOS_ENABLE_CUDA)
  cudaProfilerStop();
#endif
  const double span_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  install(false);
  g = nullptr;
  for (size_t i = 0; i < p.used; ++i) {
    OpKind& k = p.kinds[size_t(p.marks[i].kind)];
    k.ms += elapsed_ms(p.marks[i], false, p.marks[i], true);
    k.calls += 1;
    if (i) k.idle_before_ms += std::max(0.0, elapsed_ms(p.marks[i - 1], true, p.marks[i], false));
  }
#if defined(KOKKOS_ENABLE_CUDA)
  for (Mark& m : p.marks) cudaEventDestroy(m.begin), cudaEventDestroy(m.end);
#endif
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "bench_train_step: cannot write %s\n", path);
    return;
  }
  write_json(f, p, steps, span_ms, context);
  std::fclose(f);
}

}  // namespace gpt2::bench
