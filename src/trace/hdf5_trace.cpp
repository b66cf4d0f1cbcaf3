#include "trace/hdf5_trace.hpp"

#include <hdf5.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

#ifndef GPT2_GIT_REVISION
#define GPT2_GIT_REVISION "unknown"
#endif
#ifndef GPT2_VERSION
#define GPT2_VERSION "0"
#endif

namespace gpt2 {

namespace {

struct EventRecord {
  int32_t rank, kind, step, microbatch, stage;
  double start, end;
};
struct MetricRecord {
  int32_t step;
  double loss, lr, grad_norm, step_time, tokens_per_s, val_loss;
};

void check(herr_t r, const char* what, const std::string& path) {
  if (r < 0) fail_input(path, "HDF5 ", what, " failed");
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

// An array attribute holding every rank's value (collective).
void attr_per_rank(hid_t obj, const char* name, double mine, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<double> all(size_t(size), 0.0);
  MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm);
  const hsize_t n = all.size();
  hid_t s = H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, all.data());
  H5Aclose(a), H5Sclose(s);
}

}  // namespace

std::string git_revision() { return GPT2_GIT_REVISION; }

std::string versions() {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string m(mpi, size_t(len));
  if (m.find('\n') != std::string::npos) m = m.substr(0, m.find('\n'));
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "gpt2-kokkos %s; Kokkos %d.%d.%d; %s; HDF5 %u.%u.%u", GPT2_VERSION,
                KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100, m.c_str(), maj,
                min, rel);
  return buf;
}

void write_hdf5_trace(const std::string& path, MPI_Comm comm, const TraceMeta& meta, const Tracer& tracer,
                      const std::vector<StepMetrics>& metrics) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string tmp = path + ".tmp";

  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, once
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (file < 0) fail_input(path, "cannot create the HDF5 trace");
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
  attr_int(g, "dp", meta.dp);
  attr_int(g, "pp", meta.pp);
  attr_int(g, "microbatches", meta.microbatches);
  attr_int(g, "blas_threads", meta.blas_threads);
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
  attr_per_rank(g, "clock_error", tracer.clock_error(), comm);
  attr_per_rank(g, "param_bytes", meta.param_bytes, comm);
  attr_per_rank(g, "peak_activation_bytes", meta.activation_bytes, comm);
  H5Gclose(g);

  // /events: every rank's events at its offset.
  const auto& ev = tracer.events();
  std::vector<EventRecord> mine(ev.size());
  for (size_t i = 0; i < ev.size(); ++i)
    mine[i] = {rank, ev[i].kind, ev[i].step, ev[i].microbatch, ev[i].stage, ev[i].start, ev[i].end};
  // Recorded when they end (enclosing events after their contents): store them by start.
  std::stable_sort(mine.begin(), mine.end(), [](const EventRecord& a, const EventRecord& b) { return a.start < b.start; });
  int64_t count = int64_t(mine.size()), offset = 0, total = 0, dropped = tracer.dropped(), all_dropped = 0;
  MPI_Exscan(&count, &offset, 1, MPI_INT64_T, MPI_SUM, comm);
  if (rank == 0) offset = 0;
  MPI_Allreduce(&count, &total, 1, MPI_INT64_T, MPI_SUM, comm);
  MPI_Allreduce(&dropped, &all_dropped, 1, MPI_INT64_T, MPI_SUM, comm);
  hid_t et = H5Tcreate(H5T_COMPOUND, sizeof(EventRecord));
  H5Tinsert(et, "rank", HOFFSET(EventRecord, rank), H5T_NATIVE_INT32);
  H5Tinsert(et, "kind", HOFFSET(EventRecord, kind), H5T_NATIVE_INT32);
  H5Tinsert(et, "step", HOFFSET(EventRecord, step), H5T_NATIVE_INT32);
  H5Tinsert(et, "microbatch", HOFFSET(EventRecord, microbatch), H5T_NATIVE_INT32);
  H5Tinsert(et, "stage", HOFFSET(EventRecord, stage), H5T_NATIVE_INT32);
  H5Tinsert(et, "start", HOFFSET(EventRecord, start), H5T_NATIVE_DOUBLE);
  H5Tinsert(et, "end", HOFFSET(EventRecord, end), H5T_NATIVE_DOUBLE);
  hsize_t dims = hsize_t(total);
  hid_t fs = H5Screate_simple(1, &dims, nullptr);
  hid_t ds = H5Dcreate2(file, "events", et, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t start = hsize_t(offset), n = hsize_t(count);
  if (n) H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &n, nullptr);
  else H5Sselect_none(fs);
  hid_t ms = H5Screate_simple(1, &n, nullptr);
  if (!n) H5Sselect_none(ms);
  EventRecord dummy_event{};  // HDF5 wants a buffer even for an empty selection
  check(H5Dwrite(ds, et, ms, fs, dxpl, mine.empty() ? &dummy_event : mine.data()), "write of /events", path);
  std::string names;
  for (int k = 0; k < int(EventKind::count_); ++k) names += (k ? "," : "") + std::string(event_name(EventKind(k)));
  attr_string(ds, "kind_names", names);
  attr_int(ds, "dropped", all_dropped);
  attr_string(ds, "time_unit", "seconds on a clock shared by all ranks (offsets measured at start-up)");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(et);

  // /metrics: rank 0's per-step records.
  int64_t msteps = int64_t(metrics.size());
  MPI_Bcast(&msteps, 1, MPI_INT64_T, 0, comm);
  std::vector<MetricRecord> recs;
  if (rank == 0)
    for (const StepMetrics& m : metrics)
      recs.push_back({m.step, m.loss, m.lr, m.grad_norm, m.step_ms / 1e3, m.tokens_per_s, m.val_loss});
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(MetricRecord));
  H5Tinsert(mt, "step", HOFFSET(MetricRecord, step), H5T_NATIVE_INT32);
  H5Tinsert(mt, "loss", HOFFSET(MetricRecord, loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "lr", HOFFSET(MetricRecord, lr), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "grad_norm", HOFFSET(MetricRecord, grad_norm), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "step_time", HOFFSET(MetricRecord, step_time), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "tokens_per_s", HOFFSET(MetricRecord, tokens_per_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "val_loss", HOFFSET(MetricRecord, val_loss), H5T_NATIVE_DOUBLE);
  dims = hsize_t(msteps);
  fs = H5Screate_simple(1, &dims, nullptr);
  ds = H5Dcreate2(file, "metrics", mt, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  n = rank == 0 ? dims : 0;
  ms = H5Screate_simple(1, &n, nullptr);
  if (!n) H5Sselect_none(ms), H5Sselect_none(fs);
  MetricRecord dummy_metric{};
  check(H5Dwrite(ds, mt, ms, fs, dxpl, recs.empty() ? &dummy_metric : recs.data()), "write of /metrics", path);
  attr_string(ds, "units", "step_time in seconds; val_loss < 0 where no evaluation ran");
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Tclose(mt);

  H5Pclose(dxpl);
  if (H5Fclose(file) < 0) fail_input(path, "HDF5 close failed");
  MPI_Barrier(comm);
  if (rank == 0 && std::rename(tmp.c_str(), path.c_str()) != 0)
    fail_input(path, "cannot rename ", tmp, ": ", std::strerror(errno));
  MPI_Barrier(comm);
}

}  // namespace gpt2
