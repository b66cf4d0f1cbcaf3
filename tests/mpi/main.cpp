// MPI tests: ctest runs this binary under `mpiexec -n 2` and `-n 4`. Every rank runs every test;
// rank 0 prints the usual report, the other ranks print only their failures, and a failure on any
// rank fails the run.
#include <gtest/gtest.h>

#include <cstdio>

#include "mpi_env.hpp"

namespace gpt2::test {
static Environment* g_environment = nullptr;
Environment& environment() { return *g_environment; }
}  // namespace gpt2::test

namespace {
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  gpt2::Environment env;
  gpt2::test::g_environment = &env;
  if (env.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(env.rank()));
  }
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
