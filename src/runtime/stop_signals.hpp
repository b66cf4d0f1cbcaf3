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

}  // namespace gpt2
