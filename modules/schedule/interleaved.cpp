// interleaved (Megatron's interleaved 1F1B): each rank holds v = parallel.virtual_stages chunks of
// blocks, virtual stage k = chunk * p + rank (the chunks assigned round robin). Microbatches go
// through in groups of p: the i-th forward on a rank is chunk (i / p) % v of microbatch
// (i / (p v)) p + i % p, the backwards mirror it with the chunks reversed. Warm-up
// 2 (p - rank - 1) + (v - 1) p forwards, then one forward and one backward at a time. The bubble is
// that of 1F1B divided by v; m must be a multiple of p.
#include <algorithm>

#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> interleaved(const ScheduleShape& s) {
  const int p = s.stages, v = s.chunks, m = s.microbatches, r = s.stage, total = m * v;
  auto mb = [&](int i) { return (i / (p * v)) * p + i % p; };
  auto fwd = [&](int i) { return Action{ActionKind::forward, mb(i), -1, (i / p) % v}; };
  auto bwd = [&](int i) { return Action{ActionKind::backward, mb(i), -1, v - 1 - (i / p) % v}; };
  const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
  std::vector<Action> compute;
  for (int i = 0; i < warmup; ++i) compute.push_back(fwd(i));
  for (int j = 0; j < total - warmup; ++j) compute.push_back(fwd(warmup + j)), compute.push_back(bwd(j));
  for (int j = total - warmup; j < total; ++j) compute.push_back(bwd(j));
  Placement pl;
  pl.ranks = p, pl.chunks = v;
  return with_communication(compute, pl, r, /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"interleaved", "Megatron's interleaved 1F1B: parallel.virtual_stages chunks per rank, 1F1B's bubble / v",
                  3, interleaved, Placement::Kind::loop, /*chunks=*/0, /*split_backward=*/false,
                  /*microbatches_multiple_of_stages=*/true};
  // Megatron's: the warm-up forwards and one more.
  e.max_in_flight = [](const ScheduleShape& s) {
    return std::min((s.stages - s.stage - 1) * 2 + (s.chunks - 1) * s.stages + 1, s.microbatches * s.chunks);
  };
  return e;
}());
}  // namespace

}  // namespace gpt2
