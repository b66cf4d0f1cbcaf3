#include "runtime/stop_signals.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace gpt2 {

namespace {
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1};
constexpr long long kRepeatMs = 1000;  // the same request arriving by a second path
volatile sig_atomic_t g_pending = 0;
volatile long long g_first_ms = 0;  // written and read only here, with these signals blocked
bool g_installed = false;
struct sigaction g_previous[3];

long long now_ms() {  // clock_gettime is async-signal-safe
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void on_signal(int sig) {
  const long long now = now_ms();
  if (g_pending == 0) {
    g_pending = sig, g_first_ms = now;
    return;
  }
  // Slurm's time limit and scancel send SIGTERM to a task both directly and through srun,
  // milliseconds apart: one request. A signal that comes later is a second request: no more
  // grace. The default action of these three ends the process; the signal is blocked while this
  // handler runs, so it is delivered as soon as the handler returns.
  if (now - g_first_ms < kRepeatMs) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install(struct sigaction* previous) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
  sa.sa_flags = SA_RESTART;  // interrupted system calls (reads, writes, waits) carry on
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, previous ? &previous[i] : nullptr);
}
}  // namespace

StopSignals::StopSignals() {
  if (g_installed) throw std::logic_error("StopSignals: already installed");
  g_pending = 0;
  install(g_previous);
  g_installed = true;
}

void StopSignals::reclaim() { install(nullptr); }

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int StopSignals::pending() { return g_pending; }

const char* StopSignals::name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: {
      static thread_local char buf[24];
      std::snprintf(buf, sizeof(buf), "signal %d", sig);
      return buf;
    }
  }
}

#if defined(__linux__)
namespace {
bool parent_is_hydra_proxy() {
  char path[48], comm[32] = {};
  std::snprintf(path, sizeof(path), "/proc/%d/comm", (int)::getppid());
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const bool read = std::fgets(comm, sizeof(comm), f) != nullptr;
  std::fclose(f);
  comm[std::strcspn(comm, "\n")] = '\0';
  return read && std::strcmp(comm, "hydra_pmi_proxy") == 0;
}

void sleep_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1000000L};
  ::nanosleep(&t, nullptr);
}

// The witness itself (a forked child): only async-signal-safe calls, as the rank may already run
// threads (OpenBLAS starts its pool when it is loaded).
[[noreturn]] void witness(pid_t rank, int lifeline, long open_max) {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE, SIGALRM})
    ::sigaction(s, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing but stdout, stderr and the lifeline (fd 3) stays open: not the PMI socket, whose
  // closing tells the proxy that a rank died.
  if (lifeline != 3) {
    ::dup2(lifeline, 3);
    ::close(lifeline);
  }
  ::close(STDIN_FILENO);
#if defined(SYS_close_range)
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
#endif
    for (long fd = 4; fd < open_max; ++fd) ::close((int)fd);
  // End of file: every copy of the write end is closed, i.e. the rank is exiting.
  for (char c;;) {
    const ssize_t n = ::read(3, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  // Its files are closed before it is a zombie; once it is, this process has a new parent.
  for (int i = 0; i < 10000 && ::getppid() == rank; ++i) sleep_ms(1);
  ::close(STDOUT_FILENO);  // the proxy wakes with stderr still open and reaps the rank
  for (int i = 0; i < 1000 && ::kill(rank, 0) == 0; ++i) sleep_ms(1);
  ::_exit(0);
}
}  // namespace

bool start_exit_witness() {
  if (!parent_is_hydra_proxy()) return false;
  int lifeline[2];
  if (::pipe2(lifeline, O_CLOEXEC) != 0) return false;
  long open_max = ::sysconf(_SC_OPEN_MAX);
  if (open_max <= 0 || open_max > 65536) open_max = 65536;
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);  // the child ignores them before it sees any
  // The child is born with its own name (ps, and the tests that look for rank processes, never
  // see a second "gpt2" of this rank): this thread carries it across the fork.
  char name[17] = {};
  ::prctl(PR_GET_NAME, name, 0, 0, 0);
  ::prctl(PR_SET_NAME, "gpt2-witness", 0, 0, 0);
  const pid_t rank = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) witness(rank, lifeline[0], open_max);
  ::prctl(PR_SET_NAME, name, 0, 0, 0);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(lifeline[0]);
  if (pid < 0) {
    ::close(lifeline[1]);
    return false;
  }
  return true;  // lifeline[1] stays open until this process ends (close-on-exec: not in children)
}
#else
bool start_exit_witness() { return false; }
#endif

}  // namespace gpt2
