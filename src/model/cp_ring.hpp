#pragma once
// Context parallelism's ring: the cp ranks that share a sequence, each holding two of its 2cp
// chunks. Ring attention shifts a block of device values one rank on -- every rank sends to the next
// and receives from the previous -- while it computes on the block it holds. src/parallel implements
// it on the cp Communicator (and traces it); a ring of one rank copies, so the model never tests
// for it.
#include <cstddef>

#include "tensor/views.hpp"

namespace gpt2 {

template <class T>
class CpRing {
 public:
  virtual ~CpRing() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Starts sending send (n values) to rank + 1 and receiving rank - 1's into recv (n); several may
  // be in flight; neither buffer may be touched until finish_shifts.
  virtual void start_shift(const T* send, T* recv, size_t n) = 0;
  virtual void finish_shifts() = 0;  // waits for every shift started
};

template <class T>
class SingleCp final : public CpRing<T> {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void start_shift(const T* send, T* recv, size_t n) override {
    if (send != recv) Kokkos::deep_copy(ExecSpace(), Vec<T>(recv, n), Vec<T>(const_cast<T*>(send), n));
  }
  void finish_shifts() override {}
};

}  // namespace gpt2
