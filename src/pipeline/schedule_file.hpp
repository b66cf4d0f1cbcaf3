#pragma once
// A pipeline schedule written by hand (parallel.schedule_file): each pipeline rank's compute order in
// a text file; the engine adds the messages as for its own schedules (receives before and sends
// after each pass, in sending order, neighbour exchanges paired) and registers the result under the
// file's name, so the trainer, the simulator and `gpt2 simulate` run it like any other.
//
//   # comments run to the end of a line
//   name = my-v            optional: the schedule's name (default: the file's stem)
//   placement = vee        optional: loop (virtual stage k = chunk * p + rank; default) or vee
//   chunks = 2             optional: chunks of blocks per rank (default 1; vee: 2)
//   rank 0: F0 F1 F0.1 B0.1 ...
//   rank 1: ...
//
// A pass is F (forward), B (backward) or W (weight gradients), then the microbatch, then `.chunk`
// when the rank has several (F3.1: microbatch 3 through the rank's chunk 1). A file with W passes
// splits every backward: its B passes compute input gradients only and each needs its W. One line per
// rank gives parallel.pp; the largest microbatch + 1 gives parallel.microbatches.
#include <string>
#include <vector>

#include "pipeline/schedule.hpp"

namespace gpt2 {

struct ScheduleFile {
  std::string path, name;
  Placement placement;
  bool split_backward = false;
  int microbatches = 0;
  std::vector<std::vector<Action>> compute;  // per rank: its passes, in order
};

// InputError naming parallel.schedule_file, the file, the line and what was expected.
ScheduleFile parse_schedule_file(const std::string& path, const std::string& text);
ScheduleFile read_schedule_file(const std::string& path);

// The file text of a schedule's compute orders (every rank's list; messages are left out): what
// `gpt2 simulate --print-schedule` prints, to start a schedule of one's own from.
std::string format_schedule_file(const std::string& name, const Placement& placement,
                                 const std::vector<std::vector<Action>>& per_rank);

// Registers (or, for the same file loaded again, replaces) the schedule; returns its name. A name
// taken by a built-in schedule is an InputError.
std::string register_schedule_file(const ScheduleFile& f);

}  // namespace gpt2
