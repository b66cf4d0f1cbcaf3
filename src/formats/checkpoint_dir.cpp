#include "formats/checkpoint_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace gpt2 {

std::string latest_checkpoint(const std::string& dir) {
  const std::string pointer = dir + "/latest";
  if (!file_exists(pointer)) return "";
  std::string name = read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name.empty() ? "" : dir + "/" + name;
}

void publish_checkpoint(const std::string& dir, const std::string& name) {
  AtomicFile latest(dir + "/latest");
  latest.write(name.data(), name.size());
  latest.write("\n", 1);
  latest.commit();
}

std::string checkpoint_name(long long step, CheckpointFormat format) {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt_%08lld.%s", step, word(format));
  return name;
}

namespace {
std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

// The step of "ckpt_<digits>.bin" or "ckpt_<digits>.h5", or -1 for any other name.
long long checkpoint_step(const std::string& name) {
  const size_t n = name.size();
  const size_t ext = n >= 4 && name.compare(n - 4, 4, ".bin") == 0 ? 4 : n >= 3 && name.compare(n - 3, 3, ".h5") == 0 ? 3 : 0;
  if (ext == 0 || n < 6 + ext || n > 5 + 18 + ext || name.compare(0, 5, "ckpt_") != 0) return -1;
  const std::string digits = name.substr(5, n - 5 - ext);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

bool pid_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH); }
}  // namespace

std::vector<std::pair<long long, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<long long, std::string>> out;
  for (const std::string& name : folder_entries(dir))
    if (const long long step = checkpoint_step(name); step >= 0) out.emplace_back(step, dir + "/" + name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> resume_candidates(const std::string& dir) {
  const std::string latest = latest_checkpoint(dir);
  const long long newest = latest.empty() ? -1 : checkpoint_step(latest.substr(latest.rfind('/') + 1));
  std::vector<std::string> out;
  if (!latest.empty()) out.push_back(latest);
  const auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (latest.empty() || it->first < newest) out.push_back(it->second);
  return out;
}

void prune_checkpoints(const std::string& dir, int keep, long long newest) {
  if (keep <= 0) return;
  std::vector<std::string> older;
  for (const auto& [step, path] : list_checkpoints(dir))
    if (step <= newest) older.push_back(path);
  if (older.size() <= size_t(keep)) return;
  older.resize(older.size() - size_t(keep));
  for (const std::string& path : older)
    if (std::remove(path.c_str()) == 0) std::printf("checkpoint: removed %s (checkpoint.keep = %d)\n", path.c_str(), keep);
  std::fflush(stdout);
}

void remove_dead_temporaries(const std::string& dir) {
  std::vector<std::string> stale;
  for (const std::string& name : folder_entries(dir)) {
    size_t at = std::string::npos;
    if (name.rfind("ckpt_", 0) == 0 && name.find(".bin.tmp.") != std::string::npos)
      at = name.find(".bin.tmp.") + 9;
    else if (name.rfind("ckpt_", 0) == 0 && name.find(".h5.tmp.") != std::string::npos)
      at = name.find(".h5.tmp.") + 8;
    else if (name.rfind("latest.tmp.", 0) == 0)
      at = 11;
    if (at == std::string::npos || at >= name.size() || at + 9 < name.size() ||
        name.find_first_not_of("0123456789", at) != std::string::npos)
      continue;
    const long pid = std::stol(name.substr(at));
    if (pid == ::getpid() || !pid_alive(pid)) stale.push_back(name);
  }
  for (const std::string& name : stale)
    if (std::remove((dir + "/" + name).c_str()) == 0)
      std::printf("checkpoint: removed %s/%s (left by a writer that died)\n", dir.c_str(), name.c_str());
  std::fflush(stdout);
}

// ---- the folder's lock ------------------------------------------------------------------------

namespace {
std::string host_name() {
  char h[256] = {};
  ::gethostname(h, sizeof(h) - 1);
  return h;
}

struct Holder {
  std::string host;
  long pid = 0;
};

Holder read_holder(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  Holder h;
  if (n <= 0) return h;
  char host[300] = {};
  if (std::sscanf(buf, "%299s %ld", host, &h.pid) == 2) h.host = host;
  return h;
}

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir, const std::string& key) : path_(dir + "/lock") {
  const std::string host = host_name();
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail_input(key, "cannot create the lock ", path_, ": ", std::strerror(errno));
    const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const bool held = !locked && errno == EWOULDBLOCK;  // other errors: no flock on this file system
    const Holder h = read_holder(fd);
    const bool holder_alive = held || (h.host == host && h.pid != ::getpid() && pid_alive(h.pid)) ||
                              (!locked && !h.host.empty() && h.host != host);
    if (holder_alive) {
      ::close(fd);
      fail_input(key, dir, " is in use by another run (host ", h.host.empty() ? "?" : h.host, ", pid ",
                 h.pid, "): two runs must not write one checkpoint folder (if that run is gone, remove ",
                 path_, ")");
    }
    if (!same_file(fd, path_)) {  // released and removed by its holder meanwhile: start again
      ::close(fd);
      continue;
    }
    if (!h.host.empty() && h.pid != ::getpid())
      std::printf("checkpoint: took over %s from pid %ld on %s (no longer running)\n", path_.c_str(), h.pid,
                  h.host.c_str());
    const std::string me = host + " " + std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
      const int e = errno;
      ::close(fd);
      fail_input(key, "cannot write the lock ", path_, ": ", std::strerror(e));
    }
    fd_ = fd;
    return;
  }
  fail_input(key, "could not take the lock ", path_, ": it keeps being replaced");
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ < 0) return;
  if (same_file(fd_, path_)) ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace gpt2
