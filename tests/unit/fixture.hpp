#pragma once
// Reader for the named-tensor fixtures written by tests/reference/make_fixtures.py:
// "GPT2FIX\0" | u32 count | per record: u32 name length, name, u32 dtype (0 f32, 1 f64, 2 i32),
// u32 ndim, i64 dims[ndim], row-major data.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2::test {

struct FixtureTensor {
  std::vector<int64_t> dims;
  std::vector<double> values;  // every dtype widened to double
  size_t size() const { return values.size(); }
};

inline std::map<std::string, FixtureTensor> read_fixture(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open fixture " + path);
  auto rd = [&](void* p, size_t n) {
    if (std::fread(p, 1, n, f) != n) throw std::runtime_error("truncated fixture " + path);
  };
  char magic[8];
  rd(magic, 8);
  if (std::memcmp(magic, "GPT2FIX\0", 8) != 0) throw std::runtime_error("bad fixture magic " + path);
  uint32_t count;
  rd(&count, 4);
  std::map<std::string, FixtureTensor> out;
  for (uint32_t r = 0; r < count; ++r) {
    uint32_t len, dtype, ndim;
    rd(&len, 4);
    std::string name(len, '\0');
    rd(&name[0], len);
    rd(&dtype, 4);
    rd(&ndim, 4);
    FixtureTensor t;
    t.dims.resize(ndim);
    rd(t.dims.data(), 8 * ndim);
    size_t n = 1;
    for (int64_t d : t.dims) n *= size_t(d);
    t.values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (dtype == 0) {
        float v;
        rd(&v, 4);
        t.values[i] = v;
      } else if (dtype == 1) {
        rd(&t.values[i], 8);
      } else {
        int32_t v;
        rd(&v, 4);
        t.values[i] = v;
      }
    }
    out[name] = std::move(t);
  }
  std::fclose(f);
  return out;
}

}  // namespace gpt2::test
