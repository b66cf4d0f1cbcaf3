#pragma once
// What a ParamStore's two strategies share (parallel/param_source.hpp: where the parameters live
// between uses; parallel/grad_sink.hpp: where the gradients accumulate): the layouts, the
// data-parallel group, the shard's buffers, the working copies, the pooled unit workspaces and the
// step. The store owns all of it; the strategies hold this record of references.
#include <cstdint>

#include "parallel/grad_norm.hpp"
#include "parallel/gradient_reducer.hpp"
#include "parallel/shard_layout.hpp"
#include "parallel/working_copies.hpp"
#include "tensor/buffer_pool.hpp"

namespace gpt2 {

// Unit-sized workspaces (gathered units, gradient workspaces), reused; a shortfall completes the
// oldest gradient reduction in flight, whose workspace comes back (tensor/buffer_pool.hpp).
class Workspaces {
 public:
  explicit Workspaces(GradientReducer& reducer) : reducer_(reducer) {}
  template <class T>
  Buffer<T> take(size_t n) {
    return pool<T>().take(n, [this] { return reducer_.complete_oldest(); });
  }
  template <class T>
  void give(Buffer<T> b) {
    pool<T>().give(std::move(b));
  }
  template <class T>
  BufferPool<T>& pool();
  size_t bytes() const { return f32_.bytes() + u16_.bytes(); }

 private:
  GradientReducer& reducer_;
  BufferPool<float> f32_{"unit_workspace"};
  BufferPool<uint16_t> u16_{"unit_workspace16"};
};

template <>
inline BufferPool<float>& Workspaces::pool<float>() {
  return f32_;
}
template <>
inline BufferPool<uint16_t>& Workspaces::pool<uint16_t>() {
  return u16_;
}

struct ShardBuffers {  // the shard (aliases of the whole buffers without sharding)
  Buffer<float> params, grads;
};

struct StoreParts {
  const StageLayout& layout;
  const ShardLayout& shards;
  Communicator& dp;
  Tracer& tracer;
  GradientReducer& reducer;
  WorkingCopies& copies;
  GradNorm& norm;
  Workspaces& workspaces;
  const ShardBuffers& shard;
  const int& step;  // the step in progress (for the trace)

  const Unit& unit(int u) const { return layout.units()[size_t(u)]; }
  Vec<float> shard_vec(const Buffer<float>& b) const { return Vec<float>(b.data(), shards.shard_size()); }
  // Each bucket's piece of the local layout `whole` into the shard `shard` (device copies).
  void scatter_pieces(const float* whole, float* shard_out) const;
};

}  // namespace gpt2
