#include "plugins/schedule_entry.hpp"

namespace gpt2 {

const char* action_name(ActionKind k) {
  static const char* names[] = {"recv_activation", "forward",  "send_activation",          "recv_grad",
                                "backward",        "send_grad", "send_activation_recv_grad", "send_grad_recv_activation",
                                "backward_input",  "backward_weight"};
  return names[int(k)];
}

bool is_compute(ActionKind k) {
  return k == ActionKind::forward || k == ActionKind::backward || k == ActionKind::backward_input ||
         k == ActionKind::backward_weight;
}

int schedule_chunks(const ScheduleEntry& e, int virtual_stages) { return e.chunks > 0 ? e.chunks : virtual_stages; }

int max_in_flight(const ScheduleEntry& e, const ScheduleShape& shape) {
  return e.max_in_flight ? e.max_in_flight(shape) : shape.microbatches * shape.chunks;
}

Placement schedule_placement(const ScheduleEntry& e, int ranks, int virtual_stages) {
  Placement p;
  p.kind = e.placement;
  p.ranks = ranks;
  p.chunks = schedule_chunks(e, virtual_stages);
  return p;
}

}  // namespace gpt2
