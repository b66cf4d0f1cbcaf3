// parallel.zero = 1 (ZeRO-1): the optimizer state and the update are sharded over the data-parallel
// group. Gradients are reduce-scattered in buckets as backward completes them, each rank updates
// its shard, the parameters are all-gathered: the same 2 x parameter bytes moved as all-reduce.
#include "runtime/sharding.hpp"

namespace gpt2 {
namespace {
[[maybe_unused]] const bool registered = ShardingRegistry::add(
    {"1", "ZeRO-1: optimizer state sharded; reduce-scatter gradients, all-gather parameters", 1, {true, false, false}});
}  // namespace
}  // namespace gpt2
