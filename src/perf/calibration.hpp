#pragma once
// Per-op costs measured by a run, read from its HDF5 trace (src/trace/hdf5_trace.hpp describes the
// file; it describes itself, so the event kinds are looked up by name). Best taken from a one-rank
// run with trace.units = true (then every model unit's forward and backward is timed); without unit
// events, each stage's forward and backward are shared out over its units by their FLOPs (the stage
// partitioner's block and head costs).
// Times are means over the traced steps after the first (warm-up) and over the microbatches, values
// beyond half or twice the median left out, so a noisy machine's outliers move them little.
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace gpt2 {

struct Hardware;

// Seconds of one microbatch's part, by unit kind (every block alike).
struct UnitTimes {
  double embedding = 0, block = 0, head = 0;
};

// The run a trace holds: its model and batch, its layout, where it ran.
struct TracedSetup {
  std::string path;
  ModelConfig model;
  int seq_len = 0;
  int microbatch = 0;  // sequences per microbatch in the traced run
  int tp = 1;
  bool sequence_parallel = false;
  int blas_threads = 0;
  std::string execution_space, device;
  // Where the traced run ran (/meta host): its hosts, and its ranks per host when there were
  // several (the node size it ran with; 0: one host, or a trace without hosts).
  int hosts = 0, ranks_per_node = 0;

  // InputError naming the trace unless it was recorded with `model` at sequence length `seq_len`.
  void require_shape(const ModelConfig& model, int seq_len, const std::string& config_name) const;

  // A trace of a run on several hosts gives the node size: it replaces `hw`'s devices_per_node.
  // Returns a line saying so, or "" when nothing changed.
  std::string apply_node_size(Hardware& hw) const;
};

// What the run's steps cost, per unit and per value.
struct MeasuredCosts {
  bool has_units = false;  // unit events (trace.units) or forwards and backwards shared out
  UnitTimes forward, backward;  // the head's forward includes the loss and the LM head's backward
  double optimizer_per_param = 0;  // s per parameter of the optimizer's shard
  double other_per_param = 0;      // s per local parameter: gradient zeroing and norm, outside events
  double data_per_sequence = 0;    // s to load one sequence of a microbatch
  double jitter = 0;               // relative standard deviation of a block's times (the machine's noise)
  int steps_used = 0;
};

struct Calibration : TracedSetup, MeasuredCosts {
  // Reads `path`; InputError naming it when it is not a readable trace or lacks what calibration
  // needs (forward and backward events of at least one step after the first).
  static Calibration load(const std::string& path);
};

}  // namespace gpt2
