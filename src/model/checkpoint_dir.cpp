#include "model/checkpoint_dir.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

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

std::string checkpoint_name(long long step) {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt_%08lld.bin", step);
  return name;
}

void remove_dead_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    size_t at = std::string::npos;
    if (name.rfind("ckpt_", 0) == 0 && name.find(".bin.tmp.") != std::string::npos)
      at = name.find(".bin.tmp.") + 9;
    else if (name.rfind("latest.tmp.", 0) == 0)
      at = 11;
    if (at == std::string::npos || at >= name.size() || at + 9 < name.size() ||
        name.find_first_not_of("0123456789", at) != std::string::npos)
      continue;
    const pid_t pid = pid_t(std::stol(name.substr(at)));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale)
    if (std::remove((dir + "/" + name).c_str()) == 0)
      std::printf("checkpoint: removed %s/%s (left by a writer that died)\n", dir.c_str(), name.c_str());
  std::fflush(stdout);
}

}  // namespace gpt2
