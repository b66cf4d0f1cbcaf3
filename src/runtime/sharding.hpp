#pragma once
// Sharded data parallelism (ZeRO): what each data-parallel rank keeps of the optimizer state, the
// gradients and the parameters. The levels register themselves (modules/shard: parallel.zero =
// 0..3); the machinery that carries a policy out is the engine's (src/parallel/param_store).
#include <string>

#include "runtime/registry.hpp"

namespace gpt2 {

struct ShardPolicy {
  bool optimizer = false;  // ZeRO-1: AdamW moments and the update, 1/dp each
  bool grads = false;      // ZeRO-2: the accumulated gradient too
  bool params = false;     // ZeRO-3 (FSDP): the parameters at rest too, gathered block by block
};

struct ShardingEntry {
  std::string name, help;  // name: the level, "0" .. "3"
  int order = 0;
  ShardPolicy policy;
};
using ShardingRegistry = Registry<ShardingEntry>;

// The policy of parallel.zero = level; InputError naming the key for an unknown level.
inline ShardPolicy sharding_policy(int level) {
  return ShardingRegistry::get(std::to_string(level), "parallel.zero").policy;
}

}  // namespace gpt2
