#pragma once
// Requests from outside to stop a run early: a Slurm time-limit warning (`--signal`), preemption or
// scancel (SIGTERM), Ctrl-C, or any of these forwarded by srun / mpiexec to every rank.
// While a StopSignals object lives, SIGTERM, SIGINT and SIGUSR1 only record that they came (the
// handler sets a flag: nothing else is safe there, and a rank inside a collective just finishes
// it); the run polls pending() between steps, agrees with the other ranks, saves and exits. A second
// signal, a second or more after the first, takes the signal's default action at once: the process
// ends. (Repeats within that second count once: Slurm's time limit and scancel deliver SIGTERM to
// a task twice, directly and through srun, milliseconds apart.)
namespace gpt2 {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (one object at a time)
  ~StopSignals();  // puts the previous handlers back
  // Installs the handlers again, over whatever a library put there meanwhile: MPICH's MPI_Init
  // takes SIGUSR1 (hydra's notice that a process failed), and as a singleton its handler then
  // starts an mpiexec of its own and waits for it.
  void reclaim();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since installation (its number), or 0.
  static int pending();
  // "SIGTERM", "SIGINT", "SIGUSR1", else "signal N".
  static const char* name(int sig);
};

// Under MPICH's mpiexec (this process's parent is Hydra's hydra_pmi_proxy), starts the rank's exit
// witness: a small child that holds the rank's stdout and stderr until the proxy has collected the
// rank's exit status, so that `mpiexec` reports it (4 after a stop) also when it passed a signal on.
// Why: once the proxy has forwarded a signal (SIGTERM, SIGINT, SIGUSR1 to mpiexec), it counts every
// rank it reaps after all its ranks' output pipes have closed as exit status 0 (Hydra 4.0's
// `forced_cleanup`), and it reaps a rank early only when an event on a pipe still open wakes it after
// the rank has exited. A rank's pipes close as it exits, so whether mpiexec said 4 or 0 was a race;
// with the last rank of a proxy, 0 every time. The witness closes stdout only once the rank has
// exited (keeping stderr: the proxy wakes, sees a pipe still open and reaps the rank with its
// status), waits (at most 1 s) until the rank is reaped, then closes stderr and ends. It ignores
// the stop signals (the proxy signals the rank's whole process group), closes every other file and
// shows as `gpt2-witness` in ps. Call it first, before MPI and Kokkos start. Returns whether a
// witness runs (never under srun, where the status arrives by other means, nor without a launcher).
bool start_exit_witness();

}  // namespace gpt2
