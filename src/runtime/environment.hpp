#pragma once
// One object owns the process-wide runtimes: MPI (initialised first, finalised last), Kokkos (on the
// device picked by the node-local rank), and the host BLAS thread count.
#include <mpi.h>

#include <string>

namespace gpt2 {

class Environment {
 public:
  Environment();
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this node
  int local_size() const { return local_size_; }
  MPI_Comm node_comm() const { return node_; }

  // Host BLAS threads for this rank: `requested` if > 0, else the node's cores / ranks on the node
  // (at least 1). Returns the count in use. No effect on CUDA builds.
  int set_blas_threads(int requested);
  // "Serial", "Cuda" ... and the device name where there is one.
  std::string execution_space() const;
  std::string device() const;
  int device_id() const { return device_id_; }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, device_id_ = -1;
  MPI_Comm node_ = MPI_COMM_NULL;
  bool mpi_owned_ = false;
};

}  // namespace gpt2
