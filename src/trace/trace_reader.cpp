#include <hdf5.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "hdf5/hdf5_attributes.hpp"
#include "trace/hdf5_event.hpp"
#include "trace/hdf5_trace.hpp"

namespace gpt2 {

static_assert(sizeof(hid_t) == sizeof(int64_t), "TraceReader keeps HDF5 handles as int64_t");

TraceReader::TraceReader(const std::string& path) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by us, once
  if (!std::ifstream(path).good()) fail_input(path, "cannot open the trace (expected an HDF5 trace written by gpt2 train)");
  if (H5Fis_hdf5(path.c_str()) <= 0) fail_input(path, "not an HDF5 file (expected a trace written by gpt2 train with trace.file)");
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail_input(path, "cannot open the HDF5 trace");
  meta_ = H5Oexists_by_name(file_, "meta", H5P_DEFAULT) > 0 ? H5Gopen2(file_, "meta", H5P_DEFAULT) : -1;
  events_ = H5Lexists(file_, "events", H5P_DEFAULT) > 0 ? H5Dopen2(file_, "events", H5P_DEFAULT) : -1;
  if (meta_ < 0 || events_ < 0) {
    close();  // (no destructor runs for a constructor that throws)
    fail_input(path, "no /meta and /events (not a gpt2-kokkos trace)");
  }
}

TraceReader::~TraceReader() { close(); }

void TraceReader::close() {
  if (events_ >= 0) H5Dclose(events_);
  if (meta_ >= 0) H5Gclose(meta_);
  if (file_ >= 0) H5Fclose(file_);
  events_ = meta_ = file_ = -1;
}

bool TraceReader::has(const char* name) const { return H5Aexists(meta_, name) > 0; }

std::vector<double> TraceReader::numbers(const char* name) const {
  if (!has(name)) fail_input(path_, "the trace lacks the attribute ", name, " (written by an older gpt2-kokkos?)");
  const hid_t a = H5Aopen(meta_, name, H5P_DEFAULT), s = H5Aget_space(a);
  const hssize_t n = H5Sget_simple_extent_npoints(s);
  std::vector<double> v(size_t(std::max<hssize_t>(n, 0)));
  const herr_t r = v.empty() ? 0 : H5Aread(a, H5T_NATIVE_DOUBLE, v.data());
  H5Sclose(s), H5Aclose(a);
  if (r < 0) fail_input(path_, "cannot read the attribute ", name, " as numbers");
  return v;
}

double TraceReader::number(const char* name) const {
  const std::vector<double> v = numbers(name);
  if (v.empty()) fail_input(path_, "the attribute ", name, " is empty");
  return v[0];
}


std::string TraceReader::text(const char* name) const { return hdf5_text_attribute(meta_, name); }
std::vector<std::string> TraceReader::texts(const char* name) const { return hdf5_texts_attribute(meta_, name); }

std::vector<std::string> TraceReader::kind_names() const {
  std::vector<std::string> kinds;
  std::istringstream names(hdf5_text_attribute(events_, "kind_names"));
  for (std::string k; std::getline(names, k, ',');) kinds.push_back(k);
  return kinds;
}

int TraceReader::kind_code(EventKind k) const {
  const std::vector<std::string> kinds = kind_names();
  const auto it = std::find(kinds.begin(), kinds.end(), event_name(k));
  return it == kinds.end() ? -1 : int(it - kinds.begin());
}

std::vector<TraceEvent> TraceReader::events() const {
  const hid_t in_file = H5Dget_type(events_), mt = trace_event_type(in_file);
  H5Tclose(in_file);
  const hid_t s = H5Dget_space(events_);
  const hssize_t n = H5Sget_simple_extent_npoints(s);
  H5Sclose(s);
  std::vector<TraceEvent> ev(size_t(std::max<hssize_t>(n, 0)));
  const herr_t r = ev.empty() ? 0 : H5Dread(events_, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ev.data());
  H5Tclose(mt);
  if (r < 0) fail_input(path_, "cannot read /events");
  return ev;
}

}  // namespace gpt2
