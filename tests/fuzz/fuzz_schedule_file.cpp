// libFuzzer harness: a hand-written pipeline schedule (pipeline/schedule_file.hpp), as
// parallel.schedule_file reads it. Accepted outcomes: InputError. For a file that parses: the text
// gpt2 simulate --print-schedule would write of it reads back to the same passes, placement and
// split; registered, its every rank's list (messages added) simulates to an answer (a problem is a
// fine answer: it is how a deck is refused), never a crash or a hang.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_file.hpp"
#include "pipeline/schedule_lists.hpp"

using namespace gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_input_errors("schedule file", [&] {
    ScheduleFile f = parse_schedule_file("fuzz.sched", text);
    const std::string printed = format_schedule_file(f.name, f.placement, f.compute);
    ScheduleFile back;
    if (!fuzz::expect_only_input_errors("round trip", [&] { back = parse_schedule_file("back.sched", printed); }))
      fuzz::finding("the printed schedule does not read back:\n", printed);
    if (back.compute != f.compute || back.placement.kind != f.placement.kind ||
        back.placement.chunks != f.placement.chunks || back.split_backward != f.split_backward ||
        back.microbatches != f.microbatches)
      fuzz::finding("the printed schedule reads back different:\n", printed);
    if (f.placement.ranks > 64 || f.microbatches > 256) return;  // large enough to explore; bounded time
    f.name = "fuzz";  // one registry entry, replaced each time
    register_schedule_file(f);
    const Simulation s = simulate_schedule("fuzz", f.placement.ranks, f.microbatches, f.placement.chunks);
    if (s.deadlock && s.problem.empty()) fuzz::finding("a deadlock without a message:\n", text);
  });
  return 0;
}
