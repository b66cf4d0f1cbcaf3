#pragma once
// One HDF5 file per run, written collectively by every rank with parallel HDF5. The file describes
// itself: readers take the event kinds, their classes and every rank's grid coordinates from it.
//   /meta     attributes: config (TOML text), git_revision, versions, slurm_job_id, slurm_nodes,
//             world_size, dp, pp, cp, tp (the grid's axes), zero, microbatches, schedule, virtual_stages, placement
//             (loop | vee: which virtual stage a rank's chunk is), recompute,
//             recompute_every, attention (fused | materialized: what model.attention resolved to), bubble_theory (the
//             schedule's simulated idle share with ideal stages), execution_space, device, comm,
//             blas_threads, host_threads, stage_layers, tokens_per_step, num_params, n_layer, n_head, n_embd,
//             vocab_size, seq_len, batch_size, steps, batches_per_epoch, train_tokens;
//             event_kinds, compute_kinds, communication_kinds, dp_collective_kinds (comma-separated
//             names); kind_display, kind_colours (comma-separated, one per event_kinds entry: how a
//             timeline draws the kind -- row, lane, step, unit, detail -- and its colour);
//             per rank (arrays of length world_size): dp_rank, pp_rank, cp_rank, tp_rank, host (its
//             host name), local_rank (its rank among the processes of that host), clock_error (s),
//             param_bytes, grad_bytes, optimizer_bytes (memory at rest), stage_param_bytes (the
//             parameters of the rank's stage, unsharded: the Psi of ZeRO), param_gather_bytes (what
//             one ZeRO all-gather of those delivers: 16-bit matrices under mixed precision; 0 without
//             sharding), peak_activation_bytes, peak_microbatches (the most microbatch-chunks whose
//             activations it held at once),
//             peak_workspace_bytes (ZeRO's gathered parameters and gradient workspaces),
//             what the device did in a training step (the most of any step, the first included;
//             tensor/device_counters; -1 when a Kokkos tools library holds the callbacks):
//             device_waits_per_step (whole-device fences, the ones Kokkos inserts included),
//             allocations_per_step (allocations + frees), host_waits_per_step (the host blocked on
//             a communication), stream_waits_per_step (an execution space's own fence, or a launch
//             that waits), host_copies_per_step (copies between device and pageable host memory),
//             launches_per_step (kernels), bytes_moved_per_step (the memory traffic the kernels,
//             GEMMs and copies declare: tensor/traffic.hpp); fences_reported (1: this Kokkos reports fences, so the
//             wait counts mean something; 0: they read 0 whatever the code does);
//             predicted_memory_bytes, measured_memory_bytes (the run's prediction of the rank's
//             memory, and its most Kokkos memory at once; train/prediction.hpp), measured_rss_bytes
//             (the rank's peak resident memory);
//             prediction_source, predicted_step_ms, predicted_tokens_per_s (one each; "" and 0: none);
//             event_timing: "fenced per event" (trace.sync), "fenced per unit" (trace.units), or
//             "host issue times" (device work runs behind the host: an event ends when its work
//             was queued, not done)
//   /events   compound {rank, kind, step, microbatch, stage, start, end, bytes, chunk, unit, pair}: all
//             ranks, rank order, each rank's events by start time; attribute kind_names lists the
//             kind codes; dropped = events that did not fit. step is 0-based (eval events: the steps
//             completed so far); microbatch is -1 for whole-step events and the bucket index for
//             allreduce_issue; bytes: what a communication event moved (the collective's data volume
//             as the ZeRO paper counts it); chunk: the pipeline chunk of a compute event; unit
//             (trace.units): 0 embedding, 1 + l block l, n_layer + 1 the head and loss, else -1;
//             pair: a forward and a backward the schedule pairs (dualpipev) share a number > 0
//   /metrics  compound {step, loss, lr, grad_norm, step_time, tokens_per_s, val_loss, skipped} (one
//             per step; skipped 1: update skipped for a non-finite loss or gradient norm)
// The file is written to "<file>.tmp" and renamed when complete, so a crash mid-write keeps the
// previous version.
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "runtime/topology.hpp"
#include "trace/tracer.hpp"

namespace gpt2 {

class Communicator;

struct TraceMeta {
  std::string config_toml, schedule, execution_space, device, comm, recompute = "none", placement = "loop";
  std::string attention = "materialized";
  int recompute_every = 1;
  int world_size = 1, zero = 0, microbatches = 1, virtual_stages = 1, blas_threads = 1, host_threads = 1, seq_len = 0;
  GridShape grid;    // written as one attribute per axis (dp, pp, cp, tp)
  GridCoords coords;  // this rank's: per-rank arrays dp_rank, pp_rank, cp_rank, tp_rank
  std::string host;    // this rank's host name and its rank among the processes there
  int local_rank = 0;
  double bubble_theory = 0;
  std::vector<int> stage_layers;
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;  // this rank's, at rest
  double stage_param_bytes = 0;                                 // its stage's, unsharded
  double param_gather_bytes = 0;  // one ZeRO all-gather of its stage's parameters delivers (0: none)
  double activation_bytes = 0, workspace_bytes = 0;             // this rank's peaks
  double peak_microbatches = 0;  // the most microbatch-chunks it held activations for at once
  // This rank's most in one training step (tensor/device_counters; -1: not counted).
  double device_waits_per_step = -1, allocations_per_step = -1, host_waits_per_step = -1, stream_waits_per_step = -1,
         host_copies_per_step = -1, launches_per_step = -1, bytes_moved_per_step = -1;
  int fences_reported = 0;  // whether the wait counts can be trusted (tensor/device_counters)
  // The run's prediction (train/prediction.hpp; source "" and values 0: none) and this rank's
  // measured side of it: its most Kokkos memory at once.
  std::string prediction_source;
  double predicted_step_ms = 0, predicted_tokens_per_s = 0, predicted_memory_bytes = 0, measured_memory_bytes = 0;
  double measured_rss_bytes = 0;
  std::string event_timing;          // what event times mean on a device (fenced or issue times)
  int64_t tokens_per_step = 0, num_params = 0, batch_size = 0, steps = 0, batches_per_epoch = 0,
          train_tokens = 0;
  ModelConfig model;
};

// One event as /events stores it: its rank and the Event.
struct TraceEvent {
  int32_t rank = 0, kind = 0, step = 0, microbatch = -1, stage = 0;
  double start = 0, end = 0;
  int64_t bytes = 0;
  int32_t chunk = 0, unit = -1;
  int32_t pair = 0;  // a forward and a backward a schedule pairs (dualpipev) share a number > 0
};

// One optimizer step as /metrics stores it.
struct StepRecord {
  int32_t step;
  double loss, lr, grad_norm, step_time, tokens_per_s, val_loss;  // step_time in s; val_loss < 0: none
  int8_t skipped;  // 1: the update was skipped (non-finite loss or gradient norm, train.nonfinite)
};

// Collective over comm (its control plane, and its MPI communicator for parallel HDF5). `metrics`
// are taken from rank 0.
void write_hdf5_trace(const std::string& path, Communicator& comm, const TraceMeta& meta,
                      const Tracer& tracer, const std::vector<StepRecord>& metrics);

// A trace file, read on one rank (gpt2 simulate's calibration, tools): /meta's attributes and the
// events. Opening names the file in an InputError when it is not a gpt2-kokkos trace.
class TraceReader {
 public:
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const { return path_; }
  bool has(const char* name) const;                      // a /meta attribute
  std::vector<double> numbers(const char* name) const;  // a numeric one (scalar or per rank)
  double number(const char* name) const;
  std::string text(const char* name) const;              // a string one ("" when absent)
  std::vector<std::string> texts(const char* name) const;  // a per-rank string one ({} when absent)
  std::vector<std::string> kind_names() const;           // the event kind codes' names, by code
  int kind_code(EventKind k) const;                      // its code in this file (-1: none)
  std::vector<TraceEvent> events() const;

 private:
  void close();
  std::string path_;
  int64_t file_ = -1, meta_ = -1, events_ = -1;  // HDF5 handles
};

}  // namespace gpt2
