#pragma once
// Sharded data parallelism (ZeRO): what each data-parallel rank keeps of the optimizer state, the
// gradients and the parameters (parallel.zero = 0..3). The levels and the machinery that carries
// them out (ParamStore, ShardLayout) live together here in parallel/.
#include <string>
#include <vector>

namespace gpt2 {

struct ShardPolicy {
  bool optimizer = false;  // ZeRO-1: AdamW moments and the update, 1/dp each
  bool grads = false;      // ZeRO-2: the accumulated gradient too
  bool params = false;     // ZeRO-3 (FSDP): the parameters at rest too, gathered block by block
};

struct ZeroLevel {
  int level;
  const char* help;
  ShardPolicy policy;
};

const std::vector<ZeroLevel>& zero_levels();  // 0 .. 3
bool is_zero_level(int level);
// "0, 1, 2 or 3" (for help texts: zero_level_choices(" | ", " | "))
std::string zero_level_choices(const char* separator = ", ", const char* last_separator = " or ");
// The policy of parallel.zero = level; InputError naming the key for an unknown level.
ShardPolicy zero_policy(int level);

}  // namespace gpt2
