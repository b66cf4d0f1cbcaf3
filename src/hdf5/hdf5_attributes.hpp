#pragma once
// Attributes of HDF5 objects as this project's files use them (checkpoints, traces): fixed-length
// UTF-8 strings, 64-bit integers and doubles, scalar when one value; and what HDF5's error stack
// says when a call fails. Handles are HDF5 hid_t values (64-bit), so callers need not include hdf5.h.
#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

// Each returns false when HDF5 could not write it.
bool h5_attr_text(int64_t obj, const char* name, const std::string& value);
bool h5_attr_ints(int64_t obj, const char* name, const std::vector<int64_t>& values);
bool h5_attr_uints(int64_t obj, const char* name, const std::vector<uint64_t>& values);
bool h5_attr_double(int64_t obj, const char* name, double value);
inline bool h5_attr_int(int64_t obj, const char* name, int64_t value) { return h5_attr_ints(obj, name, {value}); }
// One string per element (a 1-D array, fixed length: the longest).
bool h5_attr_texts(int64_t obj, const char* name, const std::vector<std::string>& values);

std::string hdf5_text_attribute(int64_t obj, const char* name);  // "" when absent
std::vector<std::string> hdf5_texts_attribute(int64_t obj, const char* name);  // {} when absent

// What HDF5's error stack says went wrong, innermost first, on one line as " (...)"; "" when it says
// nothing.
std::string hdf5_error_reason();

}  // namespace gpt2
