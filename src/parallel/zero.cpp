#include "parallel/zero.hpp"

#include "core/error.hpp"

namespace gpt2 {

const std::vector<ZeroLevel>& zero_levels() {
  static const std::vector<ZeroLevel> levels = {
      {0, "replicated: every rank holds parameters, gradients and optimizer state; all-reduce", {false, false, false}},
      {1, "ZeRO-1: optimizer state sharded; reduce-scatter gradients, all-gather parameters", {true, false, false}},
      {2, "ZeRO-2: optimizer state and gradients sharded; reduce-scatter every microbatch", {true, true, false}},
      {3, "ZeRO-3 / FSDP: parameters sharded too, gathered per block for forward and backward", {true, true, true}},
  };
  return levels;
}

bool is_zero_level(int level) { return level >= 0 && level < int(zero_levels().size()); }

std::string zero_level_choices(const char* separator, const char* last_separator) {
  std::string out;
  const auto& v = zero_levels();
  for (size_t i = 0; i < v.size(); ++i)
    out += (i == 0 ? "" : i + 1 == v.size() ? last_separator : separator) + std::to_string(v[i].level);
  return out;
}

ShardPolicy zero_policy(int level) {
  if (!is_zero_level(level)) fail_input("parallel.zero", "expected ", zero_level_choices(), ", got ", level);
  return zero_levels()[size_t(level)].policy;
}

}  // namespace gpt2
