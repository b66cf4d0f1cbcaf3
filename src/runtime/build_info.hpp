#pragma once
// What this binary is: version, git revision (as configured), and the libraries it runs on.
#include <string>

namespace gpt2 {

std::string version();       // "0.1.0"
std::string git_revision();  // short hash, or "unknown" outside a checkout
std::string versions();      // "gpt2-kokkos X; Kokkos X.Y.Z; MPI ...; HDF5 X.Y.Z"
std::string kokkos_version();       // "3.4.1"
std::string default_execution_space();  // "Serial", "OpenMP", "Cuda"

}  // namespace gpt2
