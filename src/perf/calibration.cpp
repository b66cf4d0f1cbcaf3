#include "perf/calibration.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "parallel/stage_partition.hpp"

namespace gpt2 {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The mean of the values within [median / 2, 2 x median]: a step adds up many such times, so their
// mean (not their median) predicts it, but one preempted outlier should not.
double typical(const std::vector<double>& v) {
  const double med = median(v);
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (x >= 0.5 * med && x <= 2 * med) sum += x, ++n;
  return n ? sum / n : med;
}

// The trace file, closed on every path out.
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // we report errors ourselves, once
    if (!std::ifstream(path).good()) fail_input(path, "cannot open the calibration trace (expected an HDF5 trace written by gpt2 train)");
    if (H5Fis_hdf5(path.c_str()) <= 0) fail_input(path, "not an HDF5 file (expected a trace written by gpt2 train with trace.file)");
    id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (id_ < 0) fail_input(path, "cannot open the HDF5 trace");
    meta_ = H5Oexists_by_name(id_, "meta", H5P_DEFAULT) > 0 ? H5Gopen2(id_, "meta", H5P_DEFAULT) : -1;
    events_ = H5Lexists(id_, "events", H5P_DEFAULT) > 0 ? H5Dopen2(id_, "events", H5P_DEFAULT) : -1;
    if (meta_ < 0 || events_ < 0) fail_input(path, "no /meta and /events (not a gpt2-kokkos trace)");
  }
  ~File() {
    if (events_ >= 0) H5Dclose(events_);
    if (meta_ >= 0) H5Gclose(meta_);
    if (id_ >= 0) H5Fclose(id_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  bool has(hid_t obj, const char* name) const { return H5Aexists(obj, name) > 0; }
  // A numeric attribute (scalar or per-rank array) as doubles.
  std::vector<double> numbers(hid_t obj, const char* name) const {
    if (!has(obj, name)) fail_input(path_, "the trace lacks the attribute ", name, " (written by an older gpt2-kokkos?)");
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t s = H5Aget_space(a);
    const hssize_t n = H5Sget_simple_extent_npoints(s);
    std::vector<double> v(size_t(std::max<hssize_t>(n, 0)));
    const herr_t r = v.empty() ? 0 : H5Aread(a, H5T_NATIVE_DOUBLE, v.data());
    H5Sclose(s), H5Aclose(a);
    if (r < 0) fail_input(path_, "cannot read the attribute ", name, " as numbers");
    return v;
  }
  double number(hid_t obj, const char* name) const {
    const auto v = numbers(obj, name);
    if (v.empty()) fail_input(path_, "the attribute ", name, " is empty");
    return v[0];
  }
  std::string text(hid_t obj, const char* name) const {
    if (!has(obj, name)) return "";
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    std::string out;
    if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t)) {
      out.resize(H5Tget_size(t));
      if (H5Aread(a, t, out.data()) < 0) out.clear();
      out = out.c_str();  // up to the terminator
    }
    H5Tclose(t), H5Aclose(a);
    return out;
  }
  hid_t meta() const { return meta_; }
  hid_t events() const { return events_; }

 private:
  std::string path_;
  hid_t id_ = -1, meta_ = -1, events_ = -1;
};

struct Ev {
  int32_t rank, kind, step, microbatch;
  double start, end;
  int32_t unit;
};

std::vector<Ev> read_events(const File& f, const std::string& path) {
  hid_t ft = H5Dget_type(f.events());
  const bool has_unit = H5Tget_member_index(ft, "unit") >= 0;
  H5Tclose(ft);
  hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(Ev));
  H5Tinsert(mt, "rank", HOFFSET(Ev, rank), H5T_NATIVE_INT32);
  H5Tinsert(mt, "kind", HOFFSET(Ev, kind), H5T_NATIVE_INT32);
  H5Tinsert(mt, "step", HOFFSET(Ev, step), H5T_NATIVE_INT32);
  H5Tinsert(mt, "microbatch", HOFFSET(Ev, microbatch), H5T_NATIVE_INT32);
  H5Tinsert(mt, "start", HOFFSET(Ev, start), H5T_NATIVE_DOUBLE);
  H5Tinsert(mt, "end", HOFFSET(Ev, end), H5T_NATIVE_DOUBLE);
  if (has_unit) H5Tinsert(mt, "unit", HOFFSET(Ev, unit), H5T_NATIVE_INT32);
  hid_t s = H5Dget_space(f.events());
  const hssize_t n = H5Sget_simple_extent_npoints(s);
  H5Sclose(s);
  std::vector<Ev> ev(size_t(std::max<hssize_t>(n, 0)), Ev{0, 0, 0, 0, 0, 0, -1});
  const herr_t r = ev.empty() ? 0 : H5Dread(f.events(), mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ev.data());
  H5Tclose(mt);
  if (r < 0) fail_input(path, "cannot read /events");
  return ev;
}

// Total length of the union of intervals.
double covered(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, lo = 0, hi = -1e300;
  for (auto [a, b] : iv) {
    if (a > hi) {
      if (hi > lo) total += hi - lo;
      lo = a, hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

// sequence_parallel from the run's configuration text (a TOML line in [parallel]).
bool sequence_parallel_in(const std::string& toml) {
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '[') section = line;
    if (section == "[parallel]" && line.rfind("sequence_parallel", 0) == 0) return line.find("true") != std::string::npos;
  }
  return false;
}

}  // namespace

Calibration Calibration::load(const std::string& path) {
  File f(path);
  Calibration c;
  c.path = path;
  const hid_t m = f.meta();
  c.model.n_layer = int(f.number(m, "n_layer"));
  c.model.n_head = int(f.number(m, "n_head"));
  c.model.n_embd = int(f.number(m, "n_embd"));
  c.model.vocab_size = int(f.number(m, "vocab_size"));
  c.seq_len = int(f.number(m, "seq_len"));
  c.model.block_size = c.seq_len;
  const int dp = int(f.number(m, "dp")), pp = int(f.number(m, "pp")), mbs = int(f.number(m, "microbatches"));
  c.tp = int(f.number(m, "tp"));
  const int64_t batch = int64_t(f.number(m, "batch_size"));
  if (dp < 1 || pp < 1 || c.tp < 1 || mbs < 1 || batch % (int64_t(dp) * mbs) != 0 || c.seq_len < 1 || c.model.n_layer < 1)
    fail_input(path, "inconsistent /meta (dp, pp, tp, microbatches, batch_size, seq_len)");
  c.microbatch = int(batch / dp / mbs);
  c.blas_threads = int(f.number(m, "blas_threads"));
  c.execution_space = f.text(m, "execution_space");
  c.device = f.text(m, "device");
  c.sequence_parallel = c.tp > 1 && sequence_parallel_in(f.text(m, "config"));
  const std::vector<double> stage_bytes = f.numbers(m, "stage_param_bytes");
  const std::vector<double> opt_bytes = f.numbers(m, "optimizer_bytes");
  const std::vector<double> pp_rank = f.numbers(m, "pp_rank");
  const std::vector<double> layers_attr = f.numbers(m, "stage_layers");

  std::vector<std::string> kinds;
  {
    std::istringstream names(f.text(f.events(), "kind_names"));
    for (std::string k; std::getline(names, k, ',');) kinds.push_back(k);
  }
  auto code = [&](const char* name) {
    const auto it = std::find(kinds.begin(), kinds.end(), name);
    return it == kinds.end() ? -1 : int(it - kinds.begin());
  };
  const int k_fwd = code("forward"), k_bwd = code("backward"), k_opt = code("optimizer"), k_data = code("data"),
            k_step = code("step"), k_uf = code("unit_forward"), k_ub = code("unit_backward"), k_eval = code("eval"),
            k_ckpt = code("checkpoint"), k_w = code("backward_weight"), k_uw = code("unit_backward_weight");
  if (k_fwd < 0 || k_bwd < 0 || k_step < 0) fail_input(path, "the trace names no forward, backward and step events");

  const std::vector<Ev> ev = read_events(f, path);
  // Steps after the first (warm-up), as traced.
  std::set<int> steps;
  for (const Ev& e : ev)
    if (e.kind == k_step) steps.insert(e.step);
  if (steps.size() < 2)
    fail_input(path, "calibration needs a trace of at least 2 training steps (the first is warm-up), got ", steps.size());
  steps.erase(steps.begin());
  c.steps_used = int(steps.size());
  auto used = [&](const Ev& e) { return steps.count(e.step) > 0; };

  const int L = c.model.n_layer, head_unit = L + 1;
  // A split backward (zero-bubble schedules) is an input pass B (backward, unit_backward) and a weight
  // pass W (backward_weight, unit_backward_weight): a unit's backward is their sum.
  std::vector<double> uf[3], ub[3], uw[3], data, opt_per_param, other_per_param;
  auto kind_of_unit = [&](int u) { return u == 0 ? 0 : u == head_unit ? 2 : 1; };
  std::map<int, std::vector<double>> fwd_by_rank, bwd_by_rank, w_by_rank;
  for (const Ev& e : ev) {
    if (!used(e)) continue;
    const double d = e.end - e.start;
    if (e.kind == k_uf && e.unit >= 0 && e.unit <= head_unit) uf[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k_ub && e.unit >= 0 && e.unit <= head_unit) ub[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k_uw && e.unit >= 0 && e.unit <= head_unit) uw[kind_of_unit(e.unit)].push_back(d);
    else if (e.kind == k_fwd) fwd_by_rank[e.rank].push_back(d);
    else if (e.kind == k_bwd) bwd_by_rank[e.rank].push_back(d);
    else if (e.kind == k_w) w_by_rank[e.rank].push_back(d);
    else if (e.kind == k_data) data.push_back(d);
  }
  if (fwd_by_rank.empty() || bwd_by_rank.empty())
    fail_input(path, "the trace has no forward and backward events after its first step");
  c.has_units = !uf[1].empty() && !ub[1].empty();
  if (c.has_units) {
    c.forward = {typical(uf[0]), typical(uf[1]), typical(uf[2])};
    c.backward = {typical(ub[0]) + typical(uw[0]), typical(ub[1]) + typical(uw[1]), typical(ub[2]) + typical(uw[2])};
    // Every block is the same work: their spread is the machine's noise (relative standard
    // deviation of the times typical() averages, forward and backward pooled).
    double sum = 0;
    int n = 0;
    for (const std::vector<double>* v : {&uf[1], &ub[1]}) {
      const double med = median(*v), mean = typical(*v);
      for (double d : *v)
        if (d >= 0.5 * med && d <= 2 * med) sum += (d / mean - 1) * (d / mean - 1), ++n;
    }
    c.jitter = n > 1 ? std::sqrt(sum / (n - 1)) : 0;
  } else {
    // Share each rank's median forward and backward over its units by FLOPs: a block's forward is
    // block_cost, the head's (logits, loss and the LM head's two backward GEMMs) 3 * head_cost; a
    // backward is twice the blocks' and next to nothing for the ends.
    std::vector<int> layers(layers_attr.begin(), layers_attr.end());
    if (int(layers.size()) != pp) layers = partition_stages(c.model, pp, c.seq_len);
    std::vector<double> bf, bb, hf;
    for (auto& [rank, fw] : fwd_by_rank) {
      const int s = rank < int(pp_rank.size()) ? int(pp_rank[size_t(rank)]) : 0;
      const int n = layers[size_t(std::clamp(s, 0, pp - 1))];
      const double b = block_cost(c.model, c.seq_len), h = s == pp - 1 ? 3 * head_cost(c.model) : 0.0;
      const double fmed = typical(fw), bmed = typical(bwd_by_rank[rank]) + typical(w_by_rank[rank]);
      bf.push_back(fmed * b / (n * b + h));
      if (h > 0) hf.push_back(fmed * h / (n * b + h));
      bb.push_back(bmed / n);
    }
    c.forward = {0, typical(bf), typical(hf)};
    c.backward = {0, typical(bb), 0};
  }
  c.data_per_sequence = typical(data) / c.microbatch;

  // Per rank and step: the optimizer's time per parameter of its shard (AdamW: 2 fp32 moments per
  // parameter), and what lies outside every event (zeroing, the norm) per local parameter.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> inside;
  std::map<std::pair<int, int>, std::pair<double, double>> window;
  for (const Ev& e : ev) {
    if (!used(e) || e.kind == k_uf || e.kind == k_ub || e.kind == k_uw || e.kind == k_eval || e.kind == k_ckpt) continue;
    if (e.kind == k_step) window[{e.rank, e.step}] = {e.start, e.end};
    else inside[{e.rank, e.step}].push_back({e.start, e.end});
    if (e.kind == k_opt && e.rank < int(opt_bytes.size()) && opt_bytes[size_t(e.rank)] > 0)
      opt_per_param.push_back((e.end - e.start) / (opt_bytes[size_t(e.rank)] / 8.0));
  }
  for (auto& [key, w] : window) {
    std::vector<std::pair<double, double>> iv;
    for (auto [a, b] : inside[key])
      if (a >= w.first - 1e-9 && b <= w.second + 1e-9) iv.push_back({a, b});
    const int r = key.first;
    if (r < int(stage_bytes.size()) && stage_bytes[size_t(r)] > 0)
      other_per_param.push_back(std::max(0.0, (w.second - w.first) - covered(iv)) / (stage_bytes[size_t(r)] / 4.0));
  }
  c.optimizer_per_param = typical(opt_per_param);
  // Waiting for other ranks also lies outside events: the least-waiting rank's share is the work.
  c.other_per_param = other_per_param.empty() ? 0 : *std::min_element(other_per_param.begin(), other_per_param.end());
  if (!(c.forward.block > 0) || !(c.backward.block > 0))
    fail_input(path, "the trace's forward and backward events have no duration");
  return c;
}

void Calibration::require_shape(const ModelConfig& want, int seq_len, const std::string& config_name) const {
  ModelConfig a = model, b = want;
  a.block_size = b.block_size = 0;  // the rows of wpe do not change the work
  std::string why = b.diff(a);
  if (seq_len != this->seq_len)
    why += (why.empty() ? "" : ", ") + std::string("seq_len: ") + std::to_string(seq_len) + " vs " + std::to_string(this->seq_len);
  if (!why.empty())
    fail_input(path, "a calibration trace of another model shape (", why, ", ", config_name,
               " first, the trace second): record one with the same model and data.seq_len, e.g. gpt2 train ",
               config_name, " --set trace.file=calibration.h5 --set trace.units=true");
}

}  // namespace gpt2
