#include "hdf5/hdf5_attributes.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cctype>

namespace gpt2 {

static_assert(sizeof(hid_t) == sizeof(int64_t), "HDF5 handles are passed as int64_t");

namespace {
template <class T>
bool numbers(hid_t obj, const char* name, hid_t type, const std::vector<T>& v) {
  const hsize_t n = v.size();
  const hid_t s = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t a = H5Acreate2(obj, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = a >= 0 && H5Awrite(a, type, v.data()) >= 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  return ok;
}
}  // namespace

bool h5_attr_text(int64_t obj, const char* name, const std::string& value) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, value.empty() ? 1 : value.size());
  H5Tset_cset(t, H5T_CSET_UTF8);
  const hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = a >= 0 && H5Awrite(a, t, value.empty() ? "" : value.c_str()) >= 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(s), H5Tclose(t);
  return ok;
}
bool h5_attr_texts(int64_t obj, const char* name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  std::string packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i) values[i].copy(&packed[i * width], width);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, width);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const hsize_t n = values.size();
  const hid_t s = H5Screate_simple(1, &n, nullptr), a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = a >= 0 && H5Awrite(a, t, packed.data()) >= 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(s), H5Tclose(t);
  return ok;
}
bool h5_attr_ints(int64_t obj, const char* name, const std::vector<int64_t>& v) {
  return numbers(obj, name, H5T_NATIVE_INT64, v);
}
bool h5_attr_uints(int64_t obj, const char* name, const std::vector<uint64_t>& v) {
  return numbers(obj, name, H5T_NATIVE_UINT64, v);
}
bool h5_attr_double(int64_t obj, const char* name, double value) {
  return numbers(obj, name, H5T_NATIVE_DOUBLE, std::vector<double>{value});
}

std::string hdf5_text_attribute(int64_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) return "";
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = H5Aget_type(a);
  std::string out;
  if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t)) {
    out.resize(H5Tget_size(t));
    if (H5Aread(a, t, out.data()) < 0) out.clear();
    out = out.c_str();  // up to the terminator
  }
  H5Tclose(t), H5Aclose(a);
  return out;
}

std::vector<std::string> hdf5_texts_attribute(int64_t obj, const char* name) {
  std::vector<std::string> out;
  if (H5Aexists(obj, name) <= 0) return out;
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = H5Aget_type(a), s = H5Aget_space(a);
  const hssize_t n = H5Sget_simple_extent_npoints(s);
  if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && n > 0) {
    const size_t width = H5Tget_size(t);
    std::string packed(size_t(n) * width, '\0');
    if (H5Aread(a, t, packed.data()) >= 0)
      for (hssize_t i = 0; i < n; ++i) out.push_back(packed.substr(size_t(i) * width, width).c_str());
  }
  H5Sclose(s), H5Tclose(t), H5Aclose(a);
  return out;
}

std::string hdf5_error_reason() {
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

}  // namespace gpt2
