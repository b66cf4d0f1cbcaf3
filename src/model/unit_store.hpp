#pragma once
// Where a stage's units (StageLayout::units) keep their parameters and gradients. The Stage asks
// for one unit at a time and says when it is done with it, so a store may hold everything in two
// flat buffers (FlatStore, the default) or keep only a shard and gather a unit's parameters just
// before its use, its gradients going to a workspace that is reduced and recycled once complete
// (ZeRO, src/parallel/param_store).
#include <cstdint>
#include <functional>
#include <vector>

#include "model/stage_layout.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

template <class T>
class UnitStore {
 public:
  virtual ~UnitStore() = default;
  // Unit u's parameters (its tensors at their offsets within the unit), valid until release_params.
  virtual const T* params(int u) = 0;
  virtual void release_params(int u) {}
  // Unit u's parameters as a 16-bit working copy (bf16 / fp16 bits, the run's mixed precision), valid
  // as params(u) is, where the store keeps one; nullptr where it does not (the stage then rounds the
  // weights at each GEMM). Same values either way: the copy is the masters rounded.
  virtual const uint16_t* low_params(int u) { return nullptr; }
  // The stage will want unit u's parameters next: a store that gathers them may start now.
  virtual void prefetch_params(int u) {}
  // Where unit u's gradients accumulate (+=), valid until grads_done for its final phase.
  virtual T* grads(int u) = 0;
  // Whether a writer of values [at, at + n) of grads(u) that can store its product there (store: a
  // GEMM whose library stores faster than it adds) must do so (beta 0) rather than add: nothing was
  // added to them in this accumulation. Marks them written either way: every writer of a region a
  // GEMM may store into asks before it writes, and does as told (the store may hold the last step's
  // values there, which only a store replaces). false: add, to what is 0 or added this time.
  virtual bool first_write(int u, const T* at, size_t n, bool store) { return false; }
  // The writer of [at, at + n) of grads(u) that asked first_write has written there, its last
  // values this microbatch: the store may read them now, while they are in cache.
  virtual void wrote(int u, const T* at, size_t n) {}
  // The stage has added all it will add to unit u's gradient in this microbatch's forward
  // (in_forward) or backward.
  virtual void grads_done(int u, bool in_forward) {}
};

// Everything in two flat buffers in the local layout. `done`, when set, hears every grads_done.
template <class T>
class FlatStore final : public UnitStore<T> {
 public:
  explicit FlatStore(const StageLayout& layout)
      : units_(layout.units()), param_buf("params", layout.local_size()), grad_buf("grads", layout.local_size()) {}
  const T* params_of(int u) const { return param_buf.data() + units_[size_t(u)].range.begin; }
  const T* params(int u) override { return params_of(u); }
  T* grads(int u) override { return grad_buf.data() + units_[size_t(u)].range.begin; }
  void grads_done(int u, bool in_forward) override {
    if (done) done(u, in_forward);
  }

  std::vector<Unit> units_;
  Buffer<T> param_buf, grad_buf;  // local layout
  std::function<void(int, bool)> done;
};

}  // namespace gpt2
