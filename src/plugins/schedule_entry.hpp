#pragma once
// The pipeline schedule interface: what a schedule of modules/schedule returns -- one rank's ordered
// Actions for one step -- and the ScheduleEntry it registers (parallel.schedule), with the Placement
// of its virtual stages. pipeline/ builds, proves and runs the lists (pipeline/schedule.hpp).
#include <functional>
#include <string>
#include <vector>

#include "plugins/registry.hpp"

namespace gpt2 {

enum class ActionKind {
  recv_activation, forward, send_activation, recv_grad, backward, send_grad,
  send_activation_recv_grad,  // activation of `mb` to the next stage, gradient of `recv_mb` from it
  send_grad_recv_activation,  // gradient of `mb` to the previous stage, activation of `recv_mb` from it
  backward_input,             // B: input gradients (then send_grad)
  backward_weight,            // W: weight gradients of a microbatch whose B is done
};

struct Action {
  ActionKind kind;
  int mb;            // the microbatch computed, sent or received (paired: the one sent)
  int recv_mb = -1;  // paired actions: the microbatch received
  int chunk = 0;     // the rank's chunk it concerns (paired: the sent one)
  int recv_chunk = 0;  // paired actions: the chunk the received message is for
  // A forward and a backward a schedule pairs (dualpipev: on a GPU one's computation overlaps the
  // other's communication) share a pair number > 0; the trace and the Gantt plot show it. Not part of
  // the order: equal actions may differ in it.
  int pair = 0;
  bool operator==(const Action& o) const {
    return kind == o.kind && mb == o.mb && recv_mb == o.recv_mb && chunk == o.chunk && recv_chunk == o.recv_chunk;
  }
};

const char* action_name(ActionKind k);
bool is_compute(ActionKind k);

// Which rank runs virtual stage k, and as which chunk.
//   loop: k = chunk * ranks + rank (Megatron's interleaving; one chunk: k = rank)
//   vee:  two chunks, rank r runs stage r and stage 2 ranks - 1 - r (the V of ZB-V: the first and
//         the last stage, with the embedding and the head, on rank 0)
struct Placement {
  enum class Kind { loop, vee };
  Kind kind = Kind::loop;
  int ranks = 1, chunks = 1;
  int stages() const { return ranks * chunks; }
  int stage(int rank, int chunk) const {
    return kind == Kind::loop ? chunk * ranks + rank : chunk == 0 ? rank : 2 * ranks - 1 - rank;
  }
  int rank_of(int stage) const {
    return kind == Kind::loop ? stage % ranks : stage < ranks ? stage : 2 * ranks - 1 - stage;
  }
  int chunk_of(int stage) const { return kind == Kind::loop ? stage / ranks : stage < ranks ? 0 : 1; }
};

// Relative durations of a chunk's passes, for schedules that order by time (zb-v's list schedule).
// Every rank must build its order from the same costs, so they come from the model's shape, never
// from a rank's own measurements. The defaults are a GPT-2 block's at T = C / 2 (pass_costs).
struct PassCosts {
  double forward = 1, backward_input = 1.08, backward_weight = 0.92;
};

struct ScheduleShape {
  int stages = 1, microbatches = 1, stage = 0;  // pipeline ranks, microbatches, this rank
  int chunks = 1;                              // chunks per rank
  PassCosts costs;
};

struct ScheduleEntry {
  std::string name, help;
  int order = 0;
  std::function<std::vector<Action>(const ScheduleShape&)> make;  // a rank's whole list
  Placement::Kind placement = Placement::Kind::loop;
  int chunks = 1;              // chunks per rank; 0: parallel.virtual_stages
  bool split_backward = false;  // B and W actions instead of whole backwards
  bool microbatches_multiple_of_stages = false;  // m % p == 0 required
  int min_microbatches_per_stage = 0;            // m >= this x p required (dualpipev: 2)
  // A schedule read from a file (parallel.schedule_file) runs the one shape it was written for.
  std::string file = {};
  int stages = 0, microbatches = 0;  // 0: any
  // The most microbatch-chunks the rank of `shape.stage` holds at once (activations saved for a
  // backward): the memory bound the proof of every list holds the schedule to. Unset: every
  // microbatch of every chunk (m x chunks).
  std::function<int(const ScheduleShape&)> max_in_flight = {};
};
// The schedule's bound for one rank (max_in_flight, or m x chunks).
int max_in_flight(const ScheduleEntry& e, const ScheduleShape& shape);
using ScheduleRegistry = Registry<ScheduleEntry>;

// The chunks per rank schedule `e` runs with parallel.virtual_stages = v, and its placement.
int schedule_chunks(const ScheduleEntry& e, int virtual_stages);
Placement schedule_placement(const ScheduleEntry& e, int ranks, int virtual_stages);

}  // namespace gpt2
