#pragma once
// One object owns the process-wide runtimes: MPI (initialised first, finalised last), Kokkos (on the
// device picked by the node-local rank; on the host with its share of the node's cores), and the
// host BLAS thread count. Ranks x threads never oversubscribe: by default each rank gets the cores
// it is bound to, else the node's cores divided by the ranks on it, for Kokkos and for BLAS alike.
// A world that spans nodes gives MPI_Finalize GPT2_FINALIZE_TIMEOUT seconds (default 3; 0: no
// limit), then ends the process with exit_status(): MPICH 4.0 over UCX's TCP transport (Debian 12's
// packages on an Ethernet cluster) can hang there for ever -- a rank that finished closing its
// connections waits in a PMI barrier without progressing, while a peer waits for it to acknowledge
// its last flush (MPICH removed that barrier in 2023, pmodels/mpich#6596). All output is written by
// then.
#include <mpi.h>

#include <cstdint>
#include <string>

namespace gpt2 {

class Environment {
 public:
  // MPI, then Kokkos with `host_threads` threads per rank on a threaded host backend (0: this
  // rank's share of the cores; KOKKOS_NUM_THREADS / OMP_NUM_THREADS, when set, win).
  explicit Environment(int host_threads = 0);
  // MPI only, for a command that reads its configuration before it chooses Kokkos' threads.
  struct MpiOnly {};
  explicit Environment(MpiOnly);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  void start_kokkos(int host_threads);  // once; see the first constructor

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this node
  int local_size() const { return local_size_; }
  MPI_Comm node_comm() const { return node_; }

  // The cores this rank may use: the ones it is bound to (Slurm's --cpus-per-task, mpiexec
  // -bind-to), else the node's cores / ranks on the node; at least 1.
  int cores_per_rank() const;
  int host_threads() const { return host_threads_; }  // Kokkos' threads (1 on Serial and CUDA)
  // Host BLAS threads for this rank: `requested` if > 0, else OPENBLAS_NUM_THREADS, else Kokkos'
  // threads where they are several, else cores_per_rank(). Returns the count in use. No effect on
  // CUDA builds.
  int set_blas_threads(int requested);
  int blas_threads() const { return blas_threads_; }  // the count set_blas_threads put in use (0: not yet)
  // Whether this rank's threads fit its cores: "" when Kokkos and the BLAS each run one thread a
  // core of cores_per_rank() and the node's ranks do not share cores, else one line saying which
  // cores are idle or shared (Kokkos and the BLAS take turns: the busy threads are the larger
  // count). Threaded host builds only.
  std::string thread_fit(int blas_threads) const;
  // "Serial", "OpenMP", "Cuda" ... and the device name where there is one.
  std::string execution_space() const;
  std::string device() const;
  int device_id() const { return device_id_; }
  std::string host() const;  // this machine's host name
  // The memory this rank may fill before it runs out: its GPU's, else the node's memory (or its
  // control group's limit) divided by the ranks on the node; 0 where unknown.
  uint64_t memory_limit_bytes() const;

  // The status this process ends with should MPI_Finalize hang (below); returns it, so that a
  // command can `return env.exit_status(rc);`.
  int exit_status(int status) { return exit_status_ = status; }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, device_id_ = -1, host_threads_ = 1, blas_threads_ = 0;
  int exit_status_ = 0;
  MPI_Comm node_ = MPI_COMM_NULL;
  bool mpi_owned_ = false;
};

}  // namespace gpt2
