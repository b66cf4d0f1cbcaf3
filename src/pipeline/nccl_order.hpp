#pragma once
// The pass lists under NCCL's ordering: whether they run to the end as the executor issues them
// (a rank's messages between two computes one group, the groups in issue order), and, for lists
// that would hang so (interleaved and V pipelines), the same computes with their messages placed in
// lockstep. The pass-list proof (pipeline/pass_lists) runs in_order_problem on every list.
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace gpt2 {

// The lists under NCCL's ordering, as the executor issues them: each rank's run of messages between
// two computes is one group; a rank's groups run one at a time in issue order (a device's queue), a
// message moves only while both its send's and its receive's groups head their ranks' queues, a
// group completes once all its messages have; a compute starts once the receive it needs has
// completed. "" when every list runs to the end; otherwise who waits for what.
std::string in_order_problem(const std::vector<std::vector<Action>>& per_rank, const Placement& placement);

// Every rank's lists with their messages placed in lockstep, for lists whose natural placement
// (a receive right before the compute that needs it, a send right after the compute that made it)
// would hang under NCCL's ordering (interleaved and V pipelines do). The computes keep their order;
// the lists are simulated with the pass costs, and each message goes, on both of its ranks, into the
// run of messages before the first compute that starts once it was made. Every rank then issues
// its groups in the order of one global clock, each message in the same slot on both sides, so
// under in_order_problem's model no group waits on one issued later.
std::vector<std::vector<Action>> place_messages_in_lockstep(const std::vector<std::vector<Action>>& lists,
                                                            const Placement& placement, int microbatches,
                                                            const PassCosts& costs);
// The lists as they are when they run under NCCL's ordering, else placed in lockstep.
std::vector<std::vector<Action>> runnable_in_order(std::vector<std::vector<Action>> lists, const Placement& placement,
                                                   int microbatches, const PassCosts& costs);

}  // namespace gpt2
