#include "trace/hdf5_trace.hpp"

#include <hdf5.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "runtime/build_info.hpp"
#include "runtime/communicator.hpp"
#include "trace/hdf5_event.hpp"

namespace gpt2 {

namespace {

// What HDF5's error stack says went wrong, innermost first ("" when it says nothing).
std::string hdf5_reason() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (s->empty() && e->desc && *e->desc) *s = e->desc;
        return 0;
      },
      &out);
  std::string line;  // on one line (MPI's error strings carry their own line breaks)
  for (char c : out) {
    if (!std::isspace(static_cast<unsigned char>(c))) line += c;
    else if (!line.empty() && line.back() != ' ') line += ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line.empty() ? line : " (" + line + ")";
}

void check(herr_t r, const char* what, const std::string& path) {
  if (r < 0) fail_write(path, "HDF5 ", what, " failed", hdf5_reason());
}

void attr_string(hid_t obj, const char* name, const std::string& value) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, value.empty() ? 1 : value.size());
  H5Tset_cset(t, H5T_CSET_UTF8);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, value.empty() ? "" : value.c_str());
  H5Aclose(a), H5Sclose(s), H5Tclose(t);
}

void attr_ints(hid_t obj, const char* name, const std::vector<int64_t>& v) {
  const hsize_t n = v.size();
  hid_t s = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, v.data());
  H5Aclose(a), H5Sclose(s);
}
void attr_int(hid_t obj, const char* name, int64_t v) { attr_ints(obj, name, {v}); }

void attr_double(hid_t obj, const char* name, double v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a), H5Sclose(s);
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
void write_trace_file(const std::string& path, const std::string& tmp, Communicator& comm, const TraceMeta& meta,
                      const Tracer& tracer, const std::vector<StepRecord>& metrics) {
  const int rank = comm.rank();

  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, once
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm.mpi_comm(), MPI_INFO_NULL);
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) fail_write(path, "cannot create the HDF5 trace", hdf5_reason());
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);

  // /meta: attributes only (collective metadata: every rank makes the same calls).
  hid_t g = H5Gcreate2(file, "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  attr_string(g, "config", meta.config_toml);
  attr_string(g, "git_revision", git_revision());
  attr_string(g, "versions", versions());
  attr_string(g, "schedule", meta.schedule);
  attr_string(g, "execution_space", meta.execution_space);
  attr_string(g, "device", meta.device);
  attr_string(g, "comm", meta.comm);
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* nodes = std::getenv("SLURM_JOB_NODELIST");
  attr_string(g, "slurm_job_id", job ? job : "");
  attr_string(g, "slurm_nodes", nodes ? nodes : "");
  attr_int(g, "world_size", meta.world_size);
  for (Axis a : kAxes) attr_int(g, axis_name(a), meta.grid[a]);
  attr_int(g, "zero", meta.zero);
  attr_int(g, "microbatches", meta.microbatches);
  attr_int(g, "virtual_stages", meta.virtual_stages);
  attr_double(g, "bubble_theory", meta.bubble_theory);
  attr_int(g, "blas_threads", meta.blas_threads);
  attr_int(g, "host_threads", meta.host_threads);
  attr_int(g, "tokens_per_step", meta.tokens_per_step);
  attr_int(g, "num_params", meta.num_params);
  attr_int(g, "n_layer", meta.model.n_layer);
  attr_int(g, "n_head", meta.model.n_head);
  attr_int(g, "n_embd", meta.model.n_embd);
  attr_int(g, "vocab_size", meta.model.vocab_size);
  attr_int(g, "seq_len", meta.seq_len);
  attr_int(g, "batch_size", meta.batch_size);
  attr_int(g, "steps", meta.steps);
  attr_int(g, "batches_per_epoch", meta.batches_per_epoch);
  attr_int(g, "train_tokens", meta.train_tokens);
  std::vector<int64_t> layers(meta.stage_layers.begin(), meta.stage_layers.end());
  attr_ints(g, "stage_layers", layers);
  attr_string(g, "event_kinds", kind_names(any_kind));
  attr_string(g, "compute_kinds", kind_names(compute_kind));
  attr_string(g, "communication_kinds", kind_names(communication_kind));
  attr_string(g, "dp_collective_kinds", kind_names(is_dp_collective));
  attr_string(g, "kind_display", kind_list(any_kind, event_display));
  attr_string(g, "kind_colours", kind_list(any_kind, event_colour));
  for (Axis a : kAxes) attr_per_rank<int64_t>(g, (std::string(axis_name(a)) + "_rank").c_str(), meta.coords[a], comm);
  attr_per_rank(g, "clock_error", tracer.clock_error(), comm);
  attr_per_rank(g, "param_bytes", meta.param_bytes, comm);
  attr_per_rank(g, "grad_bytes", meta.grad_bytes, comm);
  attr_per_rank(g, "stage_param_bytes", meta.stage_param_bytes, comm);
  attr_per_rank(g, "optimizer_bytes", meta.optimizer_bytes, comm);
  attr_per_rank(g, "peak_workspace_bytes", meta.workspace_bytes, comm);
  attr_per_rank(g, "peak_activation_bytes", meta.activation_bytes, comm);
  attr_per_rank(g, "device_syncs_per_step", meta.device_syncs_per_step, comm);
  attr_string(g, "event_timing", meta.event_timing);
  H5Gclose(g);

  // /events: every rank's events at its offset.
  const auto& ev = tracer.events();
  std::vector<TraceEvent> mine(ev.size());
  for (size_t i = 0; i < ev.size(); ++i)
    mine[i] = {rank, ev[i].kind, ev[i].step, ev[i].microbatch, ev[i].stage, ev[i].start, ev[i].end, ev[i].bytes,
               ev[i].chunk, ev[i].unit};
  // Recorded when they end (enclosing events after their contents): store them by start.
  std::stable_sort(mine.begin(), mine.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.start < b.start; });
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
  attr_string(ds, "kind_names", kind_names(any_kind));
  attr_int(ds, "dropped", all_dropped);
  attr_string(ds, "time_unit", "seconds on a clock shared by all ranks (offsets measured at start-up)");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(et);

  // /metrics: rank 0's per-step records.
  int64_t msteps = int64_t(metrics.size());
  comm.host_broadcast(&msteps, sizeof msteps, 0);
  using MetricRecord = StepRecord;
  const std::vector<MetricRecord>& recs = metrics;
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(MetricRecord));
  H5Tinsert(mt, "step", HOFFSET(MetricRecord, step), H5T_NATIVE_INT32);
  H5Tinsert(mt, "loss", HOFFSET(MetricRecord, loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "lr", HOFFSET(MetricRecord, lr), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "grad_norm", HOFFSET(MetricRecord, grad_norm), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "step_time", HOFFSET(MetricRecord, step_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "tokens_per_s", HOFFSET(MetricRecord, tokens_per_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "val_loss", HOFFSET(MetricRecord, val_loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "skipped", HOFFSET(MetricRecord, skipped), H5T_NATIVE_INT8);
  dims = hsize_t(msteps);
  fs = H5Screate_simple(1, &dims, nullptr);
  ds = H5Dcreate2(file, "metrics", mt, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  n = rank == 0 ? dims : 0;
  ms = H5Screate_simple(1, &n, nullptr);
  if (!n) H5Sselect_none(ms), H5Sselect_none(fs);
  MetricRecord dummy_metric{};
  if (msteps > 0)
    check(H5Dwrite(ds, mt, ms, fs, dxpl, recs.empty() || rank != 0 ? &dummy_metric : recs.data()), "write of /metrics", path);
  attr_string(ds, "units", "step_time in seconds; val_loss < 0 where no evaluation ran; skipped 1 where the "
                          "update was skipped (non-finite loss or gradient norm)");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(mt);

  H5Pclose(dxpl);
  if (H5Fclose(file) < 0) fail_write(path, "HDF5 close failed", hdf5_reason());
  comm.host_sum(0);  // every rank has closed the file
  int renamed = rank != 0 || std::rename(tmp.c_str(), path.c_str()) == 0;
  const std::string why = renamed ? "" : std::strerror(errno);
  if (comm.host_sum(1 - renamed) != 0)  // every rank learns whether it worked, and fails alike
    fail_write(path, "cannot rename ", tmp, rank == 0 ? ": " + why : std::string());
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
