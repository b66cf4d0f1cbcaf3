// Oversubscribed MPI on a small box: LD_PRELOAD this library and a rank that finds nothing to do in
// MPICH's progress loop sleeps briefly instead of spinning. MPICH (ch4:ucx, Debian's build) polls
// ucp_worker_progress without ever yielding, so with more ranks than cores every collective waits for
// the scheduler to give each spinning rank its time slice: 8 ranks on 2 cores made an MPI_Barrier
// take ~40 ms, and a test suite of many short MPI jobs spent most of its time there (measured: 200
// barriers 8.3 s without, 0.45 s with). Nothing changes what MPI does, only when an idle rank yields.
//
// Active only when oversubscribed: the node's ranks (MPI_LOCALNRANKS, set by Hydra's mpiexec) times
// each rank's threads (KOKKOS_NUM_THREADS, else OMP_NUM_THREADS, else 1) exceed the cores this
// process may run on. GPT2_IDLE_SLEEP=1 / 0 forces it on / off. The tests set LD_PRELOAD to it
// (tests/CMakeLists.txt); job_scripts/local.sh does too when a workstation run is oversubscribed.
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct ucp_worker;
using progress_fn = unsigned (*)(ucp_worker*);

namespace {

int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && atoi(v) > 0 ? atoi(v) : fallback;
}

int oversubscribed(void) {
  const char* force = getenv("GPT2_IDLE_SLEEP");
  if (force && *force) return atoi(force) != 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : int(sysconf(_SC_NPROCESSORS_ONLN));
  const int ranks = env_int("MPI_LOCALNRANKS", 1);
  const int threads = env_int("KOKKOS_NUM_THREADS", env_int("OMP_NUM_THREADS", 1));
  return ranks * threads > cores;
}

}  // namespace

extern "C" unsigned ucp_worker_progress(ucp_worker* worker) {
  static progress_fn real = nullptr;
  static int sleeps = -1;  // -1: not decided yet
  static __thread unsigned idle = 0;
  if (!real) real = reinterpret_cast<progress_fn>(dlsym(RTLD_NEXT, "ucp_worker_progress"));
  if (sleeps < 0) sleeps = oversubscribed();
  const unsigned n = real(worker);
  if (n || !sleeps) {
    idle = 0;
    return n;
  }
  if (++idle > 64) {  // nothing came for a while: give the core to a rank that has work
    // 50 us, doubling every 8 sleeps up to 800 us: a short wait stays short, and a rank that waits
    // for a peer without a core (the suite's ranks outnumber its cores many times) wakes less often
    // to find nothing.
    const unsigned doublings = (idle - 65) / 8 < 4 ? (idle - 65) / 8 : 4;
    const struct timespec t = {0, 50000L << doublings};
    nanosleep(&t, nullptr);
  }
  return n;
}
