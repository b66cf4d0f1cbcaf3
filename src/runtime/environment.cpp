#include "runtime/environment.hpp"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <Kokkos_Core.hpp>
#include <hdf5.h>
#include <fstream>
#include <thread>

#include "tensor/device_counters.hpp"
#include "runtime/process_memory.hpp"
#include "runtime/watchdog.hpp"
#include "tensor/gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace gpt2 {

Environment::Environment(MpiOnly) {
  // HDF5 closes what it holds at MPI_Finalize (parallel HDF5 hooks it), not from an exit handler:
  // after a failed write the job aborts, and an exit-time close with MPI gone crashed.
  H5dont_atexit();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // MPICH's automatic choice for MPI_Ireduce_scatter_block (recursive halving below 512 KiB) spends
    // 50-120 ms a step inside the issuing calls of ZeRO's bucketed reduce-scatters, on the cores
    // backward needs; pairwise exchange issues in ~5 ms (ZeRO-1 at dp 2: 1.25 s a step, as ZeRO-0,
    // against 1.35-1.58 s). A value the user set wins; other MPIs ignore the variable.
    setenv("MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM", "sched_pairwise", 0);
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    mpi_owned_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
  MPI_Comm_rank(node_, &local_rank_);
  MPI_Comm_size(node_, &local_size_);
}

Environment::Environment(int host_threads) : Environment(MpiOnly{}) { start_kokkos(host_threads); }

void Environment::start_kokkos(int host_threads) {
  if (Kokkos::is_initialized()) return;
#if defined(KOKKOS_ENABLE_CUDA)
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) ndev = 1;
  device_id_ = local_rank_ % ndev;
#endif
  // Threads on a threaded host backend: asked for, else what the environment says, else this
  // rank's share of the cores (several ranks on a node would otherwise each start one thread per
  // core and spin against each other).
  int threads = host_threads;
  const bool from_env = std::getenv("KOKKOS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS");
  if (threads <= 0 && !from_env) threads = cores_per_rank();
  if (threads > 0) setenv("KOKKOS_NUM_THREADS", std::to_string(threads).c_str(), 1);  // one source of truth
#if KOKKOS_VERSION >= 40000
  Kokkos::InitializationSettings settings;
  if (device_id_ >= 0) settings.set_device_id(device_id_);
  settings.set_disable_warnings(true);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments args;
  args.device_id = device_id_;
  args.disable_warnings = true;
  Kokkos::initialize(args);
#endif
  host_threads_ = Kokkos::DefaultHostExecutionSpace::concurrency();
  install_device_counters();  // every fence, allocation and copy counted from here on
}

namespace {
// The node's online cores, and how many of them this process may run on (its affinity set).
struct Cores {
  int online = 1, allowed = 1;
  bool bound() const { return allowed < online; }
};
Cores cores_of_process() {
  Cores c;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  c.online = online > 0 ? int(online) : 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  c.allowed = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : c.online;
  return c;
}
}  // namespace

int Environment::cores_per_rank() const {
  const Cores c = cores_of_process();
  const int n = c.bound() ? c.allowed : c.online / local_size_;
  return n < 1 ? 1 : n;
}

namespace {
// Ends the process with `status` unless MPI_Finalize returns within GPT2_FINALIZE_TIMEOUT seconds
// (see environment.hpp). A detached thread: MPI_Finalize returning first ends the process normally.
void limit_finalize(int rank, int status) {
  const char* env = std::getenv("GPT2_FINALIZE_TIMEOUT");
  const double seconds = env ? std::atof(env) : 3.0;
  if (!(seconds > 0)) return;
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    std::fprintf(stderr,
                 "gpt2: rank %d: MPI_Finalize still waits after %g s (MPICH 4.0 over UCX's TCP transport can hang "
                 "there); the run's work is done, exiting with status %d\n",
                 rank, seconds, status);
    std::fflush(nullptr);
    std::_Exit(status);
  }).detach();
}
}  // namespace

Environment::~Environment() {
  gemm_finalize();
  if (Kokkos::is_initialized()) Kokkos::finalize();
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  if (mpi_owned_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (local_size_ < size_) limit_finalize(rank_, exit_status_);  // ranks on other nodes
      // Ranks end at different times (rank 0 writes last), and MPI_Finalize spins while it waits, on
      // the cores a late rank needs: they meet first in a wait that polls and sleeps.
      MPI_Request met;
      MPI_Ibarrier(MPI_COMM_WORLD, &met);
      mpi_wait(met, "every rank at the end (MPI_Finalize)");
      MPI_Finalize();
    }
  }
}

int Environment::set_blas_threads(int requested) {
  int n = requested;
  if (n <= 0) {
    // OPENBLAS_NUM_THREADS wins over our default: Kokkos' threads on a threaded host backend (the
    // two take turns on the same cores), else the rank's share of the cores.
    const char* env = std::getenv("OPENBLAS_NUM_THREADS");
    const bool threaded = Kokkos::is_initialized() && Kokkos::DefaultHostExecutionSpace::concurrency() > 1;
    n = env && std::atoi(env) > 0 ? std::atoi(env) : threaded ? host_threads_ : cores_per_rank();
  }
  gemm_set_host_threads(n);
  blas_threads_ = gemm_host_threads() > 0 ? gemm_host_threads() : n;
  return blas_threads_;
}

std::string Environment::thread_fit(int blas_threads) const {
#if defined(KOKKOS_ENABLE_CUDA) || !(defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS))
  (void)blas_threads;
  return "";  // (the device computes; a Serial build runs one thread whatever the cores)
#else
  const Cores node = cores_of_process();
  const int cores = cores_per_rank(), kokkos = host_threads_;
  const int busy = kokkos > blas_threads ? kokkos : blas_threads, fewer = kokkos < blas_threads ? kokkos : blas_threads;
  const auto n = [](int v) { return std::to_string(v); };
  std::string what;
  if (!node.bound() && local_size_ * busy > node.online)
    what = n(local_size_) + " rank(s) of " + n(busy) + " busy thread(s) share " + n(node.online) + " core(s)";
  else if (busy > cores)
    what = n(busy) + " busy threads share " + n(cores) + " core(s)";
  else if (fewer < cores)
    what = std::string(kokkos < blas_threads ? "Kokkos" : "the BLAS") + " leaves " + n(cores - fewer) + " core(s) idle";
  else
    return "";
  return "threads: Kokkos " + n(kokkos) + " and BLAS " + n(blas_threads) + " a rank, " + n(cores) +
         " core(s) a rank, " + n(local_size_) + " rank(s) on this node: " + what +
         "; parallel.host_threads and parallel.blas_threads choose them (0: the rank's share of the cores)";
#endif
}

std::string Environment::host() const {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

std::string Environment::execution_space() const { return Kokkos::DefaultExecutionSpace::name(); }

std::string Environment::device() const {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device_id_) == cudaSuccess) return p.name;
  return "CUDA device " + std::to_string(device_id_);
#else
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "host CPU";
#endif
}

uint64_t Environment::memory_limit_bytes() const {
#if defined(KOKKOS_ENABLE_CUDA)
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device_id_) == cudaSuccess) return uint64_t(p.totalGlobalMem);
  return 0;
#else
  return node_memory_bytes() / uint64_t(local_size_);
#endif
}

}  // namespace gpt2
