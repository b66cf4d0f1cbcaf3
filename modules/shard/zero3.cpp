// parallel.zero = 3 (ZeRO-3, FSDP): ZeRO-2, and the parameters are sharded at rest too: a unit's
// parameters are all-gathered just before its forward and again before its backward (the next
// unit's gather issued while the current one computes), freed after use; 3 x parameter bytes moved
// a step per microbatch. Each rank initialises only its shard (values by global position).
#include "runtime/sharding.hpp"

namespace gpt2 {
namespace {
[[maybe_unused]] const bool registered = ShardingRegistry::add(
    {"3", "ZeRO-3 / FSDP: parameters sharded too, gathered per block for forward and backward", 3, {true, true, true}});
}  // namespace
}  // namespace gpt2
