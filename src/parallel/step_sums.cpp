#include "parallel/step_sums.hpp"

#include "runtime/device_sync.hpp"

namespace gpt2 {

StepSums::StepSums(const CommGroups& groups)
    : groups_(groups), sums_("step_sums", 2), host_("step_sums_host", 2) {}

void StepSums::reduce(bool holds_loss, bool with_squares, bool grads_sharded) {
  auto queue = [&](Communicator& c, size_t first, size_t count) {
    if (c.size() == 1) return;
    Request r = c.iallreduce(sums_.data() + first, count, DType::f64, ReduceOp::sum);
    c.order_after(r);
  };
  if (with_squares && grads_sharded) queue(groups_.replicas(), 0, 2);
  else if (holds_loss) queue(groups_.replicas(), 0, 1);
  if (with_squares) queue(*groups_.tp, 1, 1);
  queue(*groups_.pipe, 0, with_squares ? 2 : 1);
}

StepSums::Values StepSums::read() {
  // Everything queued so far (the optimizer too, unless it waits for these values) is done when
  // the host has them.
  Kokkos::deep_copy(ExecSpace(), host_, sums_);
  device_sync("the step's loss and gradient norm");
  return {host_(0), host_(1)};
}

}  // namespace gpt2
