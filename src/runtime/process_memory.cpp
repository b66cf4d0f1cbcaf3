#include "runtime/process_memory.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace gpt2 {

namespace {
// The number after `key` in a "/proc" file of "key: value kB" lines, in bytes; 0 when absent.
uint64_t proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) {
      std::istringstream rest(line.substr(key.size()));
      uint64_t kib = 0;
      rest >> kib;
      return kib * 1024;
    }
  return 0;
}

// cgroup v2 (memory.max) or v1 (memory.limit_in_bytes) of this process; 0 when unlimited or unknown.
uint64_t cgroup_limit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word) || word == "max") continue;
    try {
      return std::stoull(word);
    } catch (...) {
      continue;
    }
  }
  return 0;
}
}  // namespace

uint64_t peak_rss_bytes() { return proc_kib("/proc/self/status", "VmHWM:"); }

uint64_t node_memory_bytes() {
  const uint64_t total = proc_kib("/proc/meminfo", "MemTotal:"), group = cgroup_limit();
  if (total == 0 || group == 0) return std::max(total, group);
  return std::min(total, group);
}

}  // namespace gpt2
