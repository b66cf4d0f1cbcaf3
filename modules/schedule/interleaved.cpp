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
  Placement pl;
  pl.ranks = s.stages, pl.chunks = s.chunks;
  return with_communication(interleaved_order(s.stages, s.chunks, s.microbatches, s.stage), pl, s.stage,
                            /*pair_exchanges=*/true);
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
