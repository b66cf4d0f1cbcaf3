# Finds everything gpt2-kokkos links against. Included once from the top-level CMakeLists.txt.

# MPI: prefer MPICH where Debian installs it beside another MPI.
if(NOT MPI_CXX_COMPILER AND EXISTS /usr/bin/mpicxx.mpich)
  set(MPI_C_COMPILER /usr/bin/mpicc.mpich)
  set(MPI_CXX_COMPILER /usr/bin/mpicxx.mpich)
endif()
find_package(MPI REQUIRED COMPONENTS C CXX)

find_package(Kokkos REQUIRED)
# Debian's Kokkos 3.4.01 exports the non-existent include dir /usr/lib/include; point it at the real one.
get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
if(_kk_inc AND Kokkos_INCLUDE_DIRS AND "${_kk_inc}" MATCHES "/usr/lib/include")
  set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
endif()

# HDF5: the parallel (MPICH) flavour, so that every rank writes one trace collectively.
set(HDF5_PREFER_PARALLEL TRUE)
if(NOT HDF5_C_COMPILER_EXECUTABLE AND EXISTS /usr/bin/h5pcc.mpich)
  set(HDF5_C_COMPILER_EXECUTABLE /usr/bin/h5pcc.mpich)
endif()
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "gpt2-kokkos needs a parallel (MPI) HDF5; on Debian install libhdf5-mpich-dev")
endif()

find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)

# Kokkos' package config lists its backends in Kokkos_DEVICES (e.g. "CUDA;SERIAL") and sets
# Kokkos_ENABLE_<DEVICE> for each. The build option and the Kokkos found must agree: the tensor
# layer picks cuBLAS or host BLAS from the Kokkos configuration.
if("CUDA" IN_LIST Kokkos_DEVICES OR Kokkos_ENABLE_CUDA)
  set(_kk_has_cuda TRUE)
else()
  set(_kk_has_cuda FALSE)
endif()
if(GPT2_ENABLE_CUDA)
  if(NOT _kk_has_cuda)
    message(FATAL_ERROR "GPT2_ENABLE_CUDA=ON needs a CUDA-enabled Kokkos, but the one found in ${Kokkos_DIR} "
                        "has devices '${Kokkos_DEVICES}'. Build one with job_scripts/build_kokkos_cuda.sh "
                        "and pass -DKokkos_ROOT=<its install folder> (job_scripts/build_cuda.sh does both).")
  endif()
  message(STATUS "Kokkos devices: ${Kokkos_DEVICES}; GPU arch: ${Kokkos_ARCH}")
  find_package(CUDAToolkit REQUIRED)
  find_package(NCCL REQUIRED)
else()
  if(_kk_has_cuda)
    message(FATAL_ERROR "The Kokkos found in ${Kokkos_DIR} is CUDA-enabled; configure with -DGPT2_ENABLE_CUDA=ON "
                        "(see job_scripts/build_cuda.sh) or point Kokkos_ROOT at a host-only Kokkos.")
  endif()
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED)
endif()

if(GPT2_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(GPT2_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

find_package(Git QUIET)
