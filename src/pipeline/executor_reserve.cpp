// PipelineExecutor's set-up (pipeline/executor.hpp): how many activation slots and message buffers
// this rank's lists hold at once, made before the first step so that no step allocates.
#include "pipeline/executor.hpp"

#include <algorithm>

namespace gpt2 {

// What communicate() takes for each message action: a receive from another rank its landing
// buffer; a message to this rank's own next (previous) chunk a copy in the inbox; an input gradient
// a copy to send from (the stage's dres is reused by the next backward); an activation is sent from
// its slot. `arrivals`: of those, the ones that end in the inbox until a compute uses them.
PipelineExecutor::MessageBuffers PipelineExecutor::buffers_for(const Action& a) const {
  const bool next_here = p2p_.next(a.chunk).rank == rank_, prev_here = p2p_.prev(a.chunk).rank == rank_;
  switch (a.kind) {
    case ActionKind::recv_activation: return {!prev_here, !prev_here};
    case ActionKind::recv_grad: return {!next_here, !next_here};
    case ActionKind::send_activation: return {next_here, next_here};
    case ActionKind::send_grad: return {1, prev_here};
    case ActionKind::send_activation_recv_grad: return {1, 1};
    case ActionKind::send_grad_recv_activation: return {2, 1};
    default: return {0, 0};
  }
}

// Walks one list as run() runs it: the most slots of each chunk live at once, and the most message
// buffers that must exist at once -- the messages in the inbox not yet used, plus all a run of
// messages takes before its group. (A sent message's buffer, and a released slot whose activation
// is still being sent, can be reclaimed by ordering after the send: they need not exist beside the
// others.)
void PipelineExecutor::peaks(const std::vector<Action>& actions, bool need_grad, std::vector<int>& slots,
                             int& messages) const {
  const int S = placement_.stages();
  std::vector<int> live(slots.size(), 0);
  int held = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (!is_compute(a.kind)) {
      int takes = 0, arrivals = 0;
      for (; i < actions.size() && !is_compute(actions[i].kind); ++i) {
        const MessageBuffers b = buffers_for(actions[i]);
        takes += b.takes, arrivals += b.arrivals;
        if (!need_grad && actions[i].kind == ActionKind::send_activation) --live[size_t(actions[i].chunk)];
      }
      messages = std::max(messages, held + takes);
      held += arrivals;
      --i;
      continue;
    }
    const int k = placement_.stage(rank_, a.chunk);
    int& n = live[size_t(a.chunk)];
    if (a.kind == ActionKind::forward) {
      slots[size_t(a.chunk)] = std::max(slots[size_t(a.chunk)], ++n);
      if (k > 0) --held;                      // its input, from the inbox
      if (!need_grad && k == S - 1) --n;      // evaluation's last stage: done with it
    } else if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) {
      if (k < S - 1) --held;  // its output's gradient
      if (a.kind == ActionKind::backward) --n;
    } else {
      --n;  // the weight pass releases the slot
    }
  }
}

void PipelineExecutor::reserve(const std::vector<Action>& train, const std::vector<Action>& eval, int B) {
  std::vector<int> slots(size_t(placement_.chunks), 0);
  int messages = 0;
  peaks(train, true, slots, messages);
  peaks(eval, false, slots, messages);
  // Slack beyond the minimum: a few sends may still be on their way without the stream waiting.
  messages_.reserve(size_t(chunks_.front()->stream_rows(B)) * size_t(chunks_.front()->config().n_embd),
                    messages + 2 * placement_.chunks);
  for (int c = 0; c < placement_.chunks; ++c) slots_.reserve(c, slots[size_t(c)], B);
}

}  // namespace gpt2
