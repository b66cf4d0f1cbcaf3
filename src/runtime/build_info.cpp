#include "runtime/build_info.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>

#include "build_revision.hpp"  // generated: GPT2_GIT_REVISION, GPT2_VERSION

namespace gpt2 {

std::string version() { return GPT2_VERSION; }
std::string git_revision() { return GPT2_GIT_REVISION; }

std::string kokkos_version() {
  return std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
         std::to_string(KOKKOS_VERSION % 100);
}

std::string default_execution_space() { return Kokkos::DefaultExecutionSpace::name(); }

std::string versions() {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string m(mpi, size_t(len));
  if (m.find('\n') != std::string::npos) m = m.substr(0, m.find('\n'));
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "gpt2-kokkos %s; Kokkos %s; %s; HDF5 %u.%u.%u", GPT2_VERSION,
                kokkos_version().c_str(), m.c_str(), maj, min, rel);
  return buf;
}

}  // namespace gpt2
