#pragma once
// A zero-bubble order built by list scheduling the whole pipeline in time: each pass takes its
// relative cost (PassCosts: from the model's shape, the same on every rank, so every rank builds the
// same orders), every backward is split into B and W, and a free rank runs a ready B first (it
// unblocks the ranks upstream), else a ready F (its last chunk's first, and only while virtual stage
// k holds fewer than bound(k) microbatches), else a pending W (oldest first). A building block of
// schedules (zb-v on the V placement, interleaved-zb on the loop one). Equal costs made every pass
// end on the same clock ticks and the ties ordered W before the gradients it waited for: with W
// cheaper than B, as it is, the bubble doubled -- hence the model's costs.
#include <functional>
#include <vector>

#include "pipeline/schedule.hpp"

namespace gpt2 {

// Every rank's compute order (F, B, W passes; no messages) for `placement` and m microbatches.
// InputError naming `who` when the bound leaves the pipeline unable to finish.
std::vector<std::vector<Action>> list_schedule(const Placement& placement, int microbatches, const PassCosts& costs,
                                               const std::function<int(int stage)>& bound, const char* who);

}  // namespace gpt2
