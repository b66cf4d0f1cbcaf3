#pragma once
// GPT-2's initialisation as a function of position: element i of global tensor t is
// stddev(t) * N(0, 1), the normal drawn from a counter-based stream keyed by (seed, t, i) (Box-Muller
// on a splitmix64 hash of the pair i / 2). Any part of the model -- a pipeline stage, a
// tensor-parallel slice, a ZeRO shard -- initialises its own elements, in parallel, and gets exactly
// the values the whole model would have (deferred initialisation). Biases are 0, LayerNorm weights 1,
// padded vocabulary rows of wte 0; the residual projections use 0.02 / sqrt(2 n_layer).
#include <cstdint>
#include <vector>

#include "model/param_layout.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// Writes the initial values of local elements [window.begin, window.end) of `tensors` (a local
// layout of `global`; elements outside every tensor get 0) to dst[0, window.size()).
template <class T>
void init_params(const ParamLayout& global, const std::vector<TensorInfo>& tensors, uint64_t seed, Range window,
                 Vec<T> dst);

}  // namespace gpt2
