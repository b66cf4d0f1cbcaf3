// parallel.zero = 0: plain data parallelism. Every rank holds the whole model, its gradients and
// both AdamW moments (16 bytes a parameter in fp32); gradients are all-reduced.
#include "runtime/sharding.hpp"

namespace gpt2 {
namespace {
[[maybe_unused]] const bool registered = ShardingRegistry::add(
    {"0", "replicated: every rank holds parameters, gradients and optimizer state; all-reduce", 0, {false, false, false}});
}  // namespace
}  // namespace gpt2
