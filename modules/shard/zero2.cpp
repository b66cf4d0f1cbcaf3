// parallel.zero = 2 (ZeRO-2): ZeRO-1, and a rank keeps only its shard of the gradient accumulated
// over microbatches: each unit's gradient goes to a workspace that is reduce-scattered and recycled
// as soon as the microbatch has completed it.
#include "runtime/sharding.hpp"

namespace gpt2 {
namespace {
[[maybe_unused]] const bool registered = ShardingRegistry::add(
    {"2", "ZeRO-2: optimizer state and gradients sharded; reduce-scatter every microbatch", 2, {true, true, false}});
}  // namespace
}  // namespace gpt2
