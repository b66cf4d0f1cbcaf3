# Finds everything gpt2-kokkos links against. Included once from the top-level CMakeLists.txt.

# MPI: prefer MPICH where Debian installs it beside another MPI.
if(NOT MPI_CXX_COMPILER AND EXISTS /usr/bin/mpicxx.mpich)
  set(MPI_C_COMPILER /usr/bin/mpicc.mpich)
  set(MPI_CXX_COMPILER /usr/bin/mpicxx.mpich)
endif()
find_package(MPI REQUIRED COMPONENTS C CXX)

# ---- Kokkos ------------------------------------------------------------------
# A CPU build runs its kernels on the host Kokkos that GPT2_HOST_KOKKOS names:
#   openmp   Kokkos 3.4.01 with the OpenMP backend, built from Debian's trilinos source by
#            `job_scripts/build_kokkos.sh openmp` into ~/.cache/gpt2-kokkos (setup.sh does it):
#            every kernel on every core of the rank (OMP_NUM_THREADS / KOKKOS_NUM_THREADS)
#   threads  the same with the Threads (pthreads) backend, compiled with ThreadSanitizer
#            (`build_kokkos.sh threads`; job_scripts/test_tsan.sh); needs GPT2_SANITIZE=thread
#   serial   the same, Serial only: the kernels on one core (`build_kokkos.sh serial`;
#            job_scripts/test_sanitizers.sh)
#   debian   Debian's libtrilinos-kokkos-dev: Serial only, without the patches -- it reports no
#            fences, so the device checks of the test suites refuse to run on it
#   auto     openmp where its install exists, else debian (with a warning)
# -DKokkos_ROOT=DIR uses the Kokkos installed in DIR instead (it must have the backend asked for).
# The CUDA build (GPT2_ENABLE_CUDA) takes the Kokkos of job_scripts/build_cuda.sh and ignores this.
set(GPT2_HOST_KOKKOS auto CACHE STRING "Host Kokkos of a CPU build: auto | openmp | threads | serial | debian")
set_property(CACHE GPT2_HOST_KOKKOS PROPERTY STRINGS auto openmp threads serial debian)
if(NOT GPT2_HOST_KOKKOS MATCHES "^(auto|openmp|threads|serial|debian)$")
  message(FATAL_ERROR "GPT2_HOST_KOKKOS is '${GPT2_HOST_KOKKOS}'; expected auto, openmp, threads, serial or debian")
endif()
# Where job_scripts/build_kokkos.sh installs a backend (it knows GPT2_CACHE, KOKKOS_<BACKEND>_PREFIX).
function(gpt2_kokkos_prefix backend out)
  execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/job_scripts/build_kokkos.sh ${backend} --print-prefix
                  OUTPUT_VARIABLE _prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _prefix)
    message(FATAL_ERROR "job_scripts/build_kokkos.sh ${backend} --print-prefix failed")
  endif()
  set(${out} "${_prefix}" PARENT_SCOPE)
endfunction()
set(_kk_want "")      # the host backend the found Kokkos must have (empty: any)
set(_kk_root "")      # where to look (empty: the system's, i.e. Debian's)
if(NOT "${Kokkos_ROOT}$ENV{Kokkos_ROOT}" STREQUAL "")
  if(NOT GPT2_HOST_KOKKOS STREQUAL "auto" AND NOT GPT2_ENABLE_CUDA)
    set(_kk_want ${GPT2_HOST_KOKKOS})
  endif()
  set(_kk_root "${Kokkos_ROOT}$ENV{Kokkos_ROOT}")
elseif(NOT GPT2_ENABLE_CUDA)
  set(_kk_want ${GPT2_HOST_KOKKOS})
  if(GPT2_HOST_KOKKOS STREQUAL "auto")
    gpt2_kokkos_prefix(openmp _kk_openmp)
    if(EXISTS "${_kk_openmp}/.gpt2-kokkos-stamp")
      set(_kk_want openmp)
    else()
      set(_kk_want debian)
      message(WARNING "No threaded Kokkos in ${_kk_openmp}: using Debian's Serial Kokkos, which runs every "
                      "kernel on one core and reports no fences. Build the threaded one with "
                      "`job_scripts/build_kokkos.sh openmp` (job_scripts/setup.sh does) and configure again, or "
                      "choose with -DGPT2_HOST_KOKKOS=debian.")
    endif()
  endif()
  if(_kk_want MATCHES "^(openmp|threads|serial)$")
    gpt2_kokkos_prefix(${_kk_want} _kk_root)
    if(NOT EXISTS "${_kk_root}/.gpt2-kokkos-stamp")
      message(FATAL_ERROR "GPT2_HOST_KOKKOS=${_kk_want}: no Kokkos installed in ${_kk_root}. "
                          "Build it with `job_scripts/build_kokkos.sh ${_kk_want}` (about a minute; the "
                          "first run downloads Debian's trilinos source, ~160 MB), or pass -DKokkos_ROOT=DIR.")
    endif()
    set(Kokkos_ROOT "${_kk_root}")
  endif()
endif()
# A build folder switched to another Kokkos (or configured before this choice existed) must not
# keep finding the previous one.
if(NOT _GPT2_KOKKOS_CHOICE STREQUAL "${_kk_want}|${_kk_root}" OR (_kk_root AND Kokkos_DIR AND NOT Kokkos_DIR MATCHES "^${_kk_root}"))
  unset(Kokkos_DIR CACHE)
endif()
set(_GPT2_KOKKOS_CHOICE "${_kk_want}|${_kk_root}" CACHE INTERNAL "the host Kokkos last configured")

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

# Kokkos' package config lists its backends in Kokkos_DEVICES (e.g. "CUDA;SERIAL", "OPENMP;SERIAL")
# and sets Kokkos_ENABLE_<DEVICE> for each. Kokkos 3.4 calls its Threads backend PTHREAD (4.x: THREADS).
if("OPENMP" IN_LIST Kokkos_DEVICES)
  set(GPT2_KOKKOS_HOST_BACKEND openmp)
elseif("PTHREAD" IN_LIST Kokkos_DEVICES OR "THREADS" IN_LIST Kokkos_DEVICES)
  set(GPT2_KOKKOS_HOST_BACKEND threads)
else()
  set(GPT2_KOKKOS_HOST_BACKEND serial)
endif()
if(GPT2_ENABLE_CUDA)
  set(_kk_how "CUDA build: GPT2_HOST_KOKKOS is not used")
else()
  set(_kk_how "GPT2_HOST_KOKKOS=${GPT2_HOST_KOKKOS}: host backend ${GPT2_KOKKOS_HOST_BACKEND}")
endif()
message(STATUS "Kokkos ${Kokkos_VERSION} in ${Kokkos_DIR}: devices ${Kokkos_DEVICES} (${_kk_how})")
if(_kk_want AND NOT _kk_want STREQUAL GPT2_KOKKOS_HOST_BACKEND)
  message(FATAL_ERROR "GPT2_HOST_KOKKOS=${_kk_want}, but the Kokkos found in ${Kokkos_DIR} has devices "
                      "'${Kokkos_DEVICES}' (host backend ${GPT2_KOKKOS_HOST_BACKEND}). Point -DKokkos_ROOT "
                      "at a Kokkos with that backend, or leave Kokkos_ROOT unset.")
endif()
# The threads install is compiled with ThreadSanitizer; libgomp (openmp) is not instrumented, so
# TSan would report its barriers as races.
if(GPT2_KOKKOS_HOST_BACKEND STREQUAL "threads" AND NOT GPT2_SANITIZE MATCHES "thread")
  message(FATAL_ERROR "The threads Kokkos (${Kokkos_DIR}) is built with -fsanitize=thread; configure "
                      "with -DGPT2_SANITIZE=thread (job_scripts/test_tsan.sh does) or choose another host Kokkos.")
endif()
if(GPT2_SANITIZE MATCHES "thread" AND GPT2_KOKKOS_HOST_BACKEND STREQUAL "openmp")
  message(WARNING "ThreadSanitizer with the OpenMP Kokkos: libgomp is not instrumented and its barriers "
                  "show as races. Use -DGPT2_HOST_KOKKOS=threads (job_scripts/test_tsan.sh).")
endif()
# GPT2_ENABLE_CUDA and the Kokkos found must agree: the tensor layer picks cuBLAS or host BLAS from
# the Kokkos configuration.
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
  # Beside Kokkos' arch (sm_80): Hopper's machine code and PTX that newer GPUs JIT-compile
  # (job_scripts/build_kokkos.sh builds Kokkos with the same).
  set(GPT2_CUDA_GENCODE "-gencode=arch=compute_90,code=sm_90;-gencode=arch=compute_90,code=compute_90"
      CACHE STRING "GPU code generated beside Kokkos' arch (nvcc -gencode options)")
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${GPT2_CUDA_GENCODE}>")
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
  # With the OpenMP Kokkos, the OpenMP build of OpenBLAS (Debian's libopenblas0-openmp): GEMMs and
  # Kokkos kernels then run on one pool of threads. Measured on GPT-2 124M: OpenBLAS's own pthreads
  # and Kokkos' spinning OpenMP threads fight for the cores (1.9 s a step against 1.05 s).
  if(GPT2_KOKKOS_HOST_BACKEND STREQUAL "openmp")
    find_library(GPT2_OPENBLAS_OPENMP NAMES libopenblas.so.0 openblas
                 PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
    if(GPT2_OPENBLAS_OPENMP)
      set(BLAS_LIBRARIES ${GPT2_OPENBLAS_OPENMP})
      message(STATUS "Host BLAS: OpenBLAS, OpenMP build (${GPT2_OPENBLAS_OPENMP}), sharing Kokkos' threads")
    else()
      message(WARNING "The OpenMP Kokkos with OpenBLAS's pthreads build: their threads compete for the cores "
                      "(install libopenblas0-openmp; job_scripts/setup.sh does).")
    endif()
  endif()
  # oneDNN (Debian's libdnnl-dev) gives the host a real bf16 GEMM on CPUs with AVX512_BF16 / AMX;
  # without it bf16 GEMMs convert their inputs to fp32 and call sgemm (README, Mixed precision).
  if(NOT GPT2_ONEDNN STREQUAL "off")
    # Found directly: Debian's dnnl-config.cmake insists on OpenCL headers for its GPU runtime,
    # which the CPU matmul never uses.
    find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
    find_library(DNNL_LIBRARY dnnl)
    if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY AND NOT TARGET DNNL::dnnl)
      add_library(DNNL::dnnl UNKNOWN IMPORTED)
      set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
                            INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
    endif()
    if(TARGET DNNL::dnnl)
      set(dnnl_FOUND TRUE)
      message(STATUS "oneDNN (${DNNL_LIBRARY}): host bf16 GEMMs")
    elseif(GPT2_ONEDNN STREQUAL "on")
      message(FATAL_ERROR "GPT2_ONEDNN=on but no oneDNN found (Debian: libdnnl-dev)")
    else()
      message(STATUS "oneDNN not found: host bf16 GEMMs convert to fp32 and use sgemm")
    endif()
  endif()
endif()

if(GPT2_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(GPT2_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

find_package(Git QUIET)
