// The three pipeline schedules. Each builds the order of forwards (F) and backwards (B) of one stage;
// with_communication then adds the receives and sends.
//   naive: F0 B0 F1 B1 ...          stages never overlap; with one microbatch this is plain model
//                                   parallelism (the whole batch flows through as one piece)
//   gpipe: F0 .. Fm-1, B0 .. Bm-1   all forwards, then all backwards: at clock k stage j runs
//                                   microbatch k - j; holds all m microbatches' activations
//   1f1b:  min(p-s-1, m) warm-up forwards, then one forward + one backward at a time, then the
//          remaining backwards (PipeDream-flush): at most p - s microbatches in flight on stage s
#include "core/error.hpp"
#include "runtime/schedule.hpp"

namespace gpt2 {

namespace {
std::vector<Action> naive(int, int m, int) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back({ActionKind::forward, i}), out.push_back({ActionKind::backward, i});
  return out;
}

std::vector<Action> gpipe(int, int m, int) {
  std::vector<Action> out;
  for (int i = 0; i < m; ++i) out.push_back({ActionKind::forward, i});
  for (int i = 0; i < m; ++i) out.push_back({ActionKind::backward, i});
  return out;
}

std::vector<Action> one_f_one_b(int p, int m, int s) {
  const int warmup = std::min(p - s - 1, m);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back({ActionKind::forward, i});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({ActionKind::forward, warmup + i});
    out.push_back({ActionKind::backward, i});
  }
  for (int i = m - warmup; i < m; ++i) out.push_back({ActionKind::backward, i});
  return out;
}
}  // namespace

const char* action_name(ActionKind k) {
  static const char* names[] = {"recv_activation", "forward", "send_activation",
                                "recv_grad",       "backward", "send_grad"};
  return names[int(k)];
}

std::vector<Action> with_communication(const std::vector<Action>& compute, int stages, int stage) {
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<Action> out;
  for (const Action& a : compute) {
    if (a.kind == ActionKind::forward) {
      if (!first) out.push_back({ActionKind::recv_activation, a.mb});
      out.push_back(a);
      if (!last) out.push_back({ActionKind::send_activation, a.mb});
    } else {
      if (!last) out.push_back({ActionKind::recv_grad, a.mb});
      out.push_back(a);
      if (!first) out.push_back({ActionKind::send_grad, a.mb});
    }
  }
  return out;
}

std::vector<Action> make_schedule(const std::string& name, int stages, int microbatches, int stage) {
  if (stages <= 0 || microbatches <= 0 || stage < 0 || stage >= stages)
    fail("make_schedule: bad arguments (stages ", stages, ", microbatches ", microbatches,
         ", stage ", stage, ")");
  std::vector<Action> (*fn)(int, int, int) = nullptr;
  if (name == "naive") fn = naive;
  else if (name == "gpipe") fn = gpipe;
  else if (name == "1f1b") fn = one_f_one_b;
  else fail_input("parallel.schedule", "expected naive, gpipe or 1f1b, got \"", name, "\"");
  return with_communication(fn(stages, microbatches, stage), stages, stage);
}

std::vector<Action> forward_only_schedule(int stages, int microbatches, int stage) {
  std::vector<Action> compute;
  for (int i = 0; i < microbatches; ++i) compute.push_back({ActionKind::forward, i});
  return with_communication(compute, stages, stage);
}

}  // namespace gpt2
