#pragma once
// The process's Environment (MPI + Kokkos), created once by the MPI test main.
#include "runtime/environment.hpp"

namespace gpt2::test {
Environment& environment();
}
