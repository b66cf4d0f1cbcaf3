#pragma once
// The collectives tensor parallelism needs among the tp ranks that share a layer (Megatron's f and g
// operators, the vocabulary-parallel loss, sequence parallelism's gathers and scatters). The model
// calls them on device buffers, blocking; src/parallel implements them on the tp Communicator (and
// traces them); a group of one rank makes each a copy or nothing, so the model never tests for it.
#include <cstddef>

#include "tensor/views.hpp"

namespace gpt2 {

template <class T>
class TpGroup {
 public:
  virtual ~TpGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void all_reduce_sum(T* buf, size_t n) = 0;
  virtual void all_reduce_max(T* buf, size_t n) = 0;
  // recv (size * n) = every rank's send (n), in rank order
  virtual void all_gather(const T* send, T* recv, size_t n) = 0;
  // recv (n) = the sum over ranks of their send[rank * n, (rank + 1) * n)
  virtual void reduce_scatter_sum(const T* send, T* recv, size_t n) = 0;
};

// One rank: reductions are the identity; a gather or scatter copies.
template <class T>
class SingleTp final : public TpGroup<T> {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(T*, size_t) override {}
  void all_reduce_max(T*, size_t) override {}
  void all_gather(const T* send, T* recv, size_t n) override { copy(send, recv, n); }
  void reduce_scatter_sum(const T* send, T* recv, size_t n) override { copy(send, recv, n); }

 private:
  static void copy(const T* send, T* recv, size_t n) {
    if (send != recv) Kokkos::deep_copy(ExecSpace(), Vec<T>(recv, n), Vec<T>(const_cast<T*>(send), n));
  }
};

}  // namespace gpt2
