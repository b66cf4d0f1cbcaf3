// interleaved-zb (interleaved zero bubble; torchtitan's ScheduleInterleavedZeroBubble, after Qi et
// al. 2023): interleaved 1F1B's placement and order -- v = parallel.virtual_stages chunks per rank,
// virtual stage k = chunk * p + rank -- with every backward split into B (in its place) and W, the
// weight passes deferred as ZB-H1 defers them: rank r keeps up to v r pending (the oldest goes first)
// and runs the rest in the cool-down, where interleaved 1F1B waits for gradients. m a multiple of p.
#include <algorithm>
#include <deque>

#include "pipeline/schedule.hpp"

namespace gpt2 {

namespace {
// Weight passes rank r keeps pending: ZB-H1's r, once per chunk (v r). Measured against keeping r,
// r + (v - 1) p and 2r (bubble at p 4, v 2, m 8: 0.104 against 0.137, 0.137, 0.104).
int pending_limit(int v, int r) { return v * r; }

std::vector<Action> interleaved_zb(const ScheduleShape& s) {
  const int p = s.stages, v = s.chunks, r = s.stage;
  const int limit = pending_limit(v, r);
  std::vector<Action> compute;
  std::deque<Action> pending;
  for (const Action& a : interleaved_order(p, v, s.microbatches, r)) {
    if (a.kind == ActionKind::forward) {
      compute.push_back(a);
      continue;
    }
    compute.push_back({ActionKind::backward_input, a.mb, -1, a.chunk});
    pending.push_back({ActionKind::backward_weight, a.mb, -1, a.chunk});
    if (int(pending.size()) > limit) {
      compute.push_back(pending.front());
      pending.pop_front();
    }
  }
  compute.insert(compute.end(), pending.begin(), pending.end());
  Placement pl;
  pl.ranks = p, pl.chunks = v;
  return with_communication(compute, pl, r, /*pair_exchanges=*/true);
}

[[maybe_unused]] const bool registered = ScheduleRegistry::add([] {
  ScheduleEntry e{"interleaved-zb",
                  "interleaved zero bubble: interleaved 1F1B with the backward split, weight passes deferred into the "
                  "cool-down; below interleaved's and zb-h1's bubble",
                  6, interleaved_zb, Placement::Kind::loop, /*chunks=*/0, /*split_backward=*/true,
                  /*microbatches_multiple_of_stages=*/true};
  e.max_in_flight = [](const ScheduleShape& s) {  // interleaved 1F1B's and the deferred weight passes'
    return std::min((s.stages - s.stage - 1) * 2 + (s.chunks - 1) * s.stages + 1 + pending_limit(s.chunks, s.stage),
                    s.microbatches * s.chunks);
  };
  return e;
}());
}  // namespace

}  // namespace gpt2
