// Unit tests run as one process; MPI is initialised too (MPICH runs a singleton world without a
// launcher) so that world-size-1 communicators and the trainer can be tested here.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <vector>

#include "tensor/gemm.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  int rc;
  {
    // Kokkos' start-up advice (OMP_PROC_BIND unset, more threads than cores) goes to stdout, where
    // ctest's test discovery would take it for test names; the thread-count runs oversubscribe on
    // purpose. (gpt2::Environment disables these warnings too.)
    std::vector<char*> args(argv, argv + argc);
    char quiet[] = "--kokkos-disable-warnings";
    args.push_back(quiet);
    int nargs = int(args.size());
    args.push_back(nullptr);
    Kokkos::ScopeGuard kokkos(nargs, args.data());
    rc = RUN_ALL_TESTS();
    gpt2::gemm_finalize();
  }
  MPI_Finalize();
  return rc;
}
