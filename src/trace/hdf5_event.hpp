#pragma once
// The HDF5 compound type of /events, shared by the trace's writer and reader (internal to trace/).
#include <hdf5.h>

#include "trace/hdf5_trace.hpp"

namespace gpt2 {

// The memory type of TraceEvent; `in_file`: a trace's /events type to read with it -- members the
// file lacks (older traces) are left out, so they keep the values the buffer had.
inline hid_t trace_event_type(hid_t in_file = -1) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(TraceEvent));
  auto add = [&](const char* name, size_t offset, hid_t type) {
    if (in_file < 0 || H5Tget_member_index(in_file, name) >= 0) H5Tinsert(t, name, offset, type);
  };
  add("rank", HOFFSET(TraceEvent, rank), H5T_NATIVE_INT32);
  add("kind", HOFFSET(TraceEvent, kind), H5T_NATIVE_INT32);
  add("step", HOFFSET(TraceEvent, step), H5T_NATIVE_INT32);
  add("microbatch", HOFFSET(TraceEvent, microbatch), H5T_NATIVE_INT32);
  add("stage", HOFFSET(TraceEvent, stage), H5T_NATIVE_INT32);
  add("start", HOFFSET(TraceEvent, start), H5T_NATIVE_DOUBLE);
  add("end", HOFFSET(TraceEvent, end), H5T_NATIVE_DOUBLE);
  add("bytes", HOFFSET(TraceEvent, bytes), H5T_NATIVE_INT64);
  add("chunk", HOFFSET(TraceEvent, chunk), H5T_NATIVE_INT32);
  add("unit", HOFFSET(TraceEvent, unit), H5T_NATIVE_INT32);
  add("pair", HOFFSET(TraceEvent, pair), H5T_NATIVE_INT32);
  return t;
}

}  // namespace gpt2
