#include "trace/hdf5_trace.hpp"

#include <hdf5.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "hdf5/hdf5_attributes.hpp"
#include "runtime/build_info.hpp"
#include "plugins/communicator.hpp"
#include "trace/hdf5_event.hpp"

namespace gpt2 {

namespace {

void check(herr_t r, const char* what, const std::string& path) {
  if (r < 0) fail_write(path, "HDF5 ", what, " failed", hdf5_error_reason());
}

// An array attribute holding every rank's value (collective).
template <class T>
void attr_per_rank(hid_t obj, const char* name, T mine, Communicator& comm) {
  const std::vector<T> all = comm.host_gather_all(mine);
  const hsize_t n = all.size();
  const hid_t type = std::is_floating_point<T>::value ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, all.data());
  H5Aclose(a), H5Sclose(s);
}

// Comma-separated: of each event kind that `keep` keeps, what `field` says (its name by default).
template <class Keep, class Field>
std::string kind_list(const Keep& keep, const Field& field) {
  std::string out;
  for (int k = 0; k < int(EventKind::count_); ++k)
    if (keep(EventKind(k))) out += (out.empty() ? "" : ",") + std::string(field(EventKind(k)));
  return out;
}
std::string kind_names(bool (*keep)(EventKind)) { return kind_list(keep, event_name); }
bool any_kind(EventKind) { return true; }
bool compute_kind(EventKind k) { return event_class(k) == EventClass::compute; }
bool communication_kind(EventKind k) { return event_class(k) == EventClass::communication; }

}  // namespace

namespace {
// The trace's /meta attributes that say what ran: the deck, the build, the grid and the model
// (the same on every rank).
void write_run_attributes(hid_t g, const TraceMeta& meta) {
  h5_attr_text(g, "config", meta.config_toml);
  h5_attr_text(g, "git_revision", git_revision());
  h5_attr_text(g, "versions", versions());
  h5_attr_text(g, "schedule", meta.schedule);
  h5_attr_text(g, "recompute", meta.recompute);
  h5_attr_text(g, "attention", meta.attention);
  h5_attr_int(g, "recompute_every", meta.recompute_every);
  h5_attr_text(g, "execution_space", meta.execution_space);
  h5_attr_text(g, "device", meta.device);
  h5_attr_text(g, "comm", meta.comm);
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* nodes = std::getenv("SLURM_JOB_NODELIST");
  h5_attr_text(g, "slurm_job_id", job ? job : "");
  h5_attr_text(g, "slurm_nodes", nodes ? nodes : "");
  h5_attr_int(g, "world_size", meta.world_size);
  for (Axis a : kAxes) h5_attr_int(g, axis_name(a), meta.grid[a]);
  h5_attr_int(g, "zero", meta.zero);
  h5_attr_int(g, "microbatches", meta.microbatches);
  h5_attr_int(g, "virtual_stages", meta.virtual_stages);
  h5_attr_text(g, "placement", meta.placement);
  h5_attr_double(g, "bubble_theory", meta.bubble_theory);
  h5_attr_int(g, "blas_threads", meta.blas_threads);
  h5_attr_int(g, "host_threads", meta.host_threads);
  h5_attr_int(g, "tokens_per_step", meta.tokens_per_step);
  h5_attr_int(g, "num_params", meta.num_params);
  h5_attr_int(g, "n_layer", meta.model.n_layer);
  h5_attr_int(g, "n_head", meta.model.n_head);
  h5_attr_int(g, "n_embd", meta.model.n_embd);
  h5_attr_int(g, "vocab_size", meta.model.vocab_size);
  h5_attr_int(g, "seq_len", meta.seq_len);
  h5_attr_int(g, "batch_size", meta.batch_size);
  h5_attr_int(g, "steps", meta.steps);
  h5_attr_int(g, "batches_per_epoch", meta.batches_per_epoch);
  h5_attr_int(g, "train_tokens", meta.train_tokens);
  std::vector<int64_t> layers(meta.stage_layers.begin(), meta.stage_layers.end());
  h5_attr_ints(g, "stage_layers", layers);
  h5_attr_text(g, "event_kinds", kind_names(any_kind));
  h5_attr_text(g, "compute_kinds", kind_names(compute_kind));
  h5_attr_text(g, "communication_kinds", kind_names(communication_kind));
  h5_attr_text(g, "dp_collective_kinds", kind_names(is_dp_collective));
  h5_attr_text(g, "kind_display", kind_list(any_kind, event_display));
  h5_attr_text(g, "kind_colours", kind_list(any_kind, event_colour));
  h5_attr_text(g, "prediction_source", meta.prediction_source);
  h5_attr_double(g, "predicted_step_ms", meta.predicted_step_ms);
  h5_attr_double(g, "predicted_tokens_per_s", meta.predicted_tokens_per_s);
}

// The /meta attributes with a value per rank (collective): its coordinates, where it ran, its
// memory and its waits.
void write_rank_attributes(hid_t g, const TraceMeta& meta, const Tracer& tracer, Communicator& comm) {
  for (Axis a : kAxes) attr_per_rank<int64_t>(g, (std::string(axis_name(a)) + "_rank").c_str(), meta.coords[a], comm);
  // Where each rank ran: its host and its rank among the processes there.
  std::array<char, 256> host{};
  meta.host.copy(host.data(), host.size() - 1);
  std::vector<std::string> hosts;
  for (const auto& h : comm.host_gather_all(host)) hosts.emplace_back(h.data());
  h5_attr_texts(g, "host", hosts);
  attr_per_rank<int64_t>(g, "local_rank", meta.local_rank, comm);
  attr_per_rank(g, "clock_error", tracer.clock_error(), comm);
  attr_per_rank(g, "param_bytes", meta.param_bytes, comm);
  attr_per_rank(g, "grad_bytes", meta.grad_bytes, comm);
  attr_per_rank(g, "stage_param_bytes", meta.stage_param_bytes, comm);
  attr_per_rank(g, "param_gather_bytes", meta.param_gather_bytes, comm);
  attr_per_rank(g, "optimizer_bytes", meta.optimizer_bytes, comm);
  attr_per_rank(g, "peak_workspace_bytes", meta.workspace_bytes, comm);
  attr_per_rank(g, "peak_activation_bytes", meta.activation_bytes, comm);
  attr_per_rank(g, "peak_microbatches", meta.peak_microbatches, comm);
  attr_per_rank(g, "device_waits_per_step", meta.device_waits_per_step, comm);
  attr_per_rank(g, "allocations_per_step", meta.allocations_per_step, comm);
  attr_per_rank(g, "host_waits_per_step", meta.host_waits_per_step, comm);
  attr_per_rank(g, "stream_waits_per_step", meta.stream_waits_per_step, comm);
  attr_per_rank(g, "host_copies_per_step", meta.host_copies_per_step, comm);
  attr_per_rank(g, "launches_per_step", meta.launches_per_step, comm);
  attr_per_rank(g, "bytes_moved_per_step", meta.bytes_moved_per_step, comm);
  attr_per_rank<int64_t>(g, "fences_reported", meta.fences_reported, comm);
  attr_per_rank(g, "predicted_memory_bytes", meta.predicted_memory_bytes, comm);
  attr_per_rank(g, "measured_memory_bytes", meta.measured_memory_bytes, comm);
  attr_per_rank(g, "measured_rss_bytes", meta.measured_rss_bytes, comm);
}

// /meta: attributes only (collective metadata: every rank makes the same calls).
void write_meta(hid_t file, const TraceMeta& meta, const Tracer& tracer, Communicator& comm) {
  hid_t g = H5Gcreate2(file, "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  write_run_attributes(g, meta);
  write_rank_attributes(g, meta, tracer, comm);
  h5_attr_text(g, "event_timing", meta.event_timing);
  H5Gclose(g);
}

// This rank's events as the file stores them: recorded when they end (enclosing events after their
// contents), stored by start.
std::vector<TraceEvent> events_by_start(const Tracer& tracer, int rank) {
  const auto& ev = tracer.events();
  std::vector<TraceEvent> mine(ev.size());
  for (size_t i = 0; i < ev.size(); ++i)
    mine[i] = {rank, ev[i].kind, ev[i].step, ev[i].microbatch, ev[i].stage, ev[i].start, ev[i].end, ev[i].bytes,
               ev[i].chunk, ev[i].unit, ev[i].pair};
  std::stable_sort(mine.begin(), mine.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.start < b.start; });
  return mine;
}

// /events: every rank's events at its offset.
void write_events(hid_t file, hid_t dxpl, const std::string& path, Communicator& comm, const Tracer& tracer) {
  const int rank = comm.rank();
  const std::vector<TraceEvent> mine = events_by_start(tracer, rank);
  const int64_t count = int64_t(mine.size()), all_dropped = comm.host_sum(tracer.dropped());
  const std::vector<int64_t> counts = comm.host_gather_all(count);
  int64_t offset = 0, total = 0;
  for (int r = 0; r < int(counts.size()); ++r) offset += r < rank ? counts[size_t(r)] : 0, total += counts[size_t(r)];
  hid_t et = trace_event_type();
  hsize_t dims = hsize_t(total);
  hid_t fs = H5Screate_simple(1, &dims, nullptr);
  hid_t ds = H5Dcreate2(file, "events", et, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t start = hsize_t(offset), n = hsize_t(count);
  if (n) H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &n, nullptr);
  else H5Sselect_none(fs);
  hid_t ms = H5Screate_simple(1, &n, nullptr);
  if (!n) H5Sselect_none(ms);
  TraceEvent dummy_event{};  // HDF5 wants a buffer even for an empty selection
  if (total > 0)  // (a run stopped before its first step has none: HDF5 refuses to write nothing)
    check(H5Dwrite(ds, et, ms, fs, dxpl, mine.empty() ? &dummy_event : mine.data()), "write of /events", path);
  h5_attr_text(ds, "kind_names", kind_names(any_kind));
  h5_attr_int(ds, "dropped", all_dropped);
  h5_attr_text(ds, "time_unit", "seconds on a clock shared by all ranks (offsets measured at start-up)");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(et);
}

// The file's record of one step (StepRecord's fields).
hid_t metric_type() {
  using MetricRecord = StepRecord;
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(MetricRecord));
  H5Tinsert(mt, "step", HOFFSET(MetricRecord, step), H5T_NATIVE_INT32);
  H5Tinsert(mt, "loss", HOFFSET(MetricRecord, loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "lr", HOFFSET(MetricRecord, lr), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "grad_norm", HOFFSET(MetricRecord, grad_norm), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "step_time", HOFFSET(MetricRecord, step_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "tokens_per_s", HOFFSET(MetricRecord, tokens_per_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "val_loss", HOFFSET(MetricRecord, val_loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "skipped", HOFFSET(MetricRecord, skipped), H5T_NATIVE_INT8);
  return mt;
}

// /metrics: rank 0's per-step records.
void write_metrics(hid_t file, hid_t dxpl, const std::string& path, Communicator& comm,
                   const std::vector<StepRecord>& metrics) {
  const int rank = comm.rank();
  int64_t msteps = int64_t(metrics.size());
  comm.host_broadcast(&msteps, sizeof msteps, 0);
  hid_t mt = metric_type();
  hsize_t dims = hsize_t(msteps);
  hid_t fs = H5Screate_simple(1, &dims, nullptr);
  hid_t ds = H5Dcreate2(file, "metrics", mt, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t n = rank == 0 ? dims : 0;
  hid_t ms = H5Screate_simple(1, &n, nullptr);
  if (!n) H5Sselect_none(ms), H5Sselect_none(fs);
  StepRecord dummy_metric{};
  if (msteps > 0)
    check(H5Dwrite(ds, mt, ms, fs, dxpl, metrics.empty() || rank != 0 ? &dummy_metric : metrics.data()),
          "write of /metrics", path);
  h5_attr_text(ds, "units", "step_time in seconds; val_loss < 0 where no evaluation ran; skipped 1 where the "
                          "update was skipped (non-finite loss or gradient norm)");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(mt);
}

// Closes the file every rank wrote to `tmp` and renames it to `path`: every rank learns whether it
// worked, and fails alike.
void close_and_rename(hid_t file, const std::string& path, const std::string& tmp, Communicator& comm) {
  const int rank = comm.rank();
  if (H5Fclose(file) < 0) fail_write(path, "HDF5 close failed", hdf5_error_reason());
  comm.host_sum(0);  // every rank has closed the file
  int renamed = rank != 0 || std::rename(tmp.c_str(), path.c_str()) == 0;
  const std::string why = renamed ? "" : std::strerror(errno);
  if (comm.host_sum(1 - renamed) != 0)
    fail_write(path, "cannot rename ", tmp, rank == 0 ? ": " + why : std::string());
}

void write_trace_file(const std::string& path, const std::string& tmp, Communicator& comm, const TraceMeta& meta,
                      const Tracer& tracer, const std::vector<StepRecord>& metrics) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, once
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm.mpi_comm(), MPI_INFO_NULL);
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) fail_write(path, "cannot create the HDF5 trace", hdf5_error_reason());
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  write_meta(file, meta, tracer, comm);
  write_events(file, dxpl, path, comm, tracer);
  write_metrics(file, dxpl, path, comm, metrics);
  H5Pclose(dxpl);
  close_and_rename(file, path, tmp, comm);
}

}  // namespace

void write_hdf5_trace(const std::string& path, Communicator& comm, const TraceMeta& meta, const Tracer& tracer,
                      const std::vector<StepRecord>& metrics) {
  const std::string tmp = path + ".tmp";
  try {
    write_trace_file(path, tmp, comm, meta, tracer, metrics);
  } catch (const WriteError&) {
    // No partial file: the caller stops the job (HDF5's handles stay open; its exit handlers are
    // off, runtime/environment, so nothing touches them after MPI is gone).
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace gpt2
