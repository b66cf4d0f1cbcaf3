// Unit tests run as one process; MPI is initialised too (MPICH runs a singleton world without a
// launcher) so that world-size-1 communicators and the trainer can be tested here.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "tensor/gemm.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  int rc;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    rc = RUN_ALL_TESTS();
    gpt2::gemm_finalize();
  }
  MPI_Finalize();
  return rc;
}
