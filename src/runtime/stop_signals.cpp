#include "runtime/stop_signals.hpp"

#include <signal.h>
#include <time.h>

#include <cstdio>
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

}  // namespace gpt2
