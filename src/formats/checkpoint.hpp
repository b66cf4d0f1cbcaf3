#pragma once
// Native checkpoints: one file per save, independent of the dp/pp layout that wrote it (parameters
// and optimizer moments in the global flat layout), so a run can resume on a different grid.
//   "GPT2KCKP" | u32 version | u32 sections | sections x {name[24], u64 offset, u64 bytes, u64 hash}
//   then the section bytes. Sections: model (5 x i32), meta (i64 step, 4 x u64 rng), config (TOML
//   text), optimizer (name), updates (i64: optimizer updates applied, fewer than the steps when
//   train.nonfinite = "skip" skipped some; absent in older files: as many as the steps), params,
//   opt.m, opt.v (f32, global layout).
// Written to a temporary file and renamed; every section carries a checksum verified on load.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace gpt2 {

struct CheckpointMeta {
  ModelConfig model;
  int64_t step = 0;  // optimizer steps completed
  std::array<uint64_t, 4> rng{};
  std::string config_toml;
  std::string optimizer;  // "adamw" or empty (weights only)
  int64_t updates = -1;   // optimizer updates applied; -1: as many as steps
  double loss_scale = 0;          // fp16's dynamic loss scale (0: the run that wrote it had none)
  int64_t loss_scale_clean = 0;    // and its clean steps since the last change
};

// Streams a checkpoint out: the caller hands over each float section in order of the global layout.
class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& path, const CheckpointMeta& meta, size_t num_params,
                   const std::vector<std::string>& float_sections);  // e.g. {"params","opt.m","opt.v"}
  ~CheckpointWriter();
  void append(const float* data, size_t n);  // next piece of the current float section
  void commit();                             // all sections complete: fsync + rename

 private:
  struct Impl;
  Impl* impl_;
};

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);  // InputError on a bad header
  ~CheckpointReader();
  const CheckpointMeta& meta() const { return meta_; }
  bool has(const std::string& section) const { return sections_.count(section) > 0; }
  uint64_t bytes(const std::string& section) const;  // 0 when absent
  // Reads floats [begin, begin + n) of a float section.
  void read(const std::string& section, size_t begin, size_t n, float* dst) const;
  // Recomputes every section's checksum; InputError naming the file and section on mismatch.
  void verify() const;

 private:
  struct Section {
    uint64_t offset, bytes, hash;
  };
  std::string path_;
  std::FILE* f_ = nullptr;
  std::map<std::string, Section> sections_;
  CheckpointMeta meta_;
};

// The checksum fed in pieces of any size (the same digest as one call on the whole).
class ChecksumStream {
 public:
  explicit ChecksumStream(uint64_t seed = 0x243F6A8885A308D3ull) : h(seed) {}
  void update(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    total += n;
    if (ntail) {  // complete the partial word left by the previous piece
      const size_t take = n < 8 - ntail ? n : 8 - ntail;
      std::memcpy(tail + ntail, p, take);
      ntail += take, p += take, n -= take;
      if (ntail < 8) return;
      uint64_t w;
      std::memcpy(&w, tail, 8);
      mix(w);
      ntail = 0;
    }
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      mix(w);
    }
    std::memcpy(tail, p, n);  // n < 8 here
    ntail = n;
  }
  uint64_t digest() {
    uint64_t w = 0;
    std::memcpy(&w, tail, ntail);
    mix(w ^ (total << 3));
    return h ^ (h >> 31);
  }
 private:
  void mix(uint64_t w) {
    h ^= w * 0x9E3779B97F4A7C15ull;
    h = (h << 27 | h >> 37) * 0xC2B2AE3D27D4EB4Full;
  }
  uint64_t h;
  unsigned char tail[8];
  size_t ntail = 0;
  uint64_t total = 0;
};

// True if the file starts with our checkpoint magic.
bool is_native_checkpoint(const std::string& path);
// Checksum used by the format (64-bit, word-wise, fast).
uint64_t checksum(const void* data, size_t bytes, uint64_t seed = 0x243F6A8885A308D3ull);

}  // namespace gpt2
