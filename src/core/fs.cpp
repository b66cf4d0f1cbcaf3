#include "core/fs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace gpt2 {

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) fail_input(path, "cannot write here: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (bytes && std::fwrite(data, 1, bytes, f_) != bytes)
    fail_write(path_, "write failed: ", std::strerror(errno));
}

void AtomicFile::patch(long offset, const void* data, size_t bytes) {
  if (std::fseek(f_, offset, SEEK_SET) != 0 || std::fwrite(data, 1, bytes, f_) != bytes ||
      std::fseek(f_, 0, SEEK_END) != 0)
    fail_write(path_, "write failed: ", std::strerror(errno));
}

void AtomicFile::commit() {
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    fail_write(path_, "flush failed: ", std::strerror(errno));
  std::fclose(f_);
  f_ = nullptr;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_.c_str());
    fail_write(path_, "rename failed: ", std::strerror(e));
  }
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

size_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? size_t(st.st_size) : 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path, const std::string& key) {
  if (path.empty()) return;
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if ((i == path.size() || path[i] == '/') && !cur.empty()) {
      if (file_exists(cur) && !is_directory(cur))
        fail_input(key, cur, " is a file, expected a folder");
      if (!is_directory(cur) && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        fail_input(key, "cannot create folder ", cur, ": ", std::strerror(errno));
    }
    if (i < path.size()) cur += path[i];
  }
  if (::access(path.c_str(), W_OK) != 0)
    fail_input(key, "folder ", path, " is not writable: ", std::strerror(errno));
}

std::string parent_folder(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

bool writable_folder(const std::string& path) { return is_directory(path) && ::access(path.c_str(), W_OK) == 0; }

void prepare_output_file(const std::string& path, const std::string& key) {
  if (path.empty()) return;
  if (is_directory(path) || path.back() == '/') fail_input(key, path, " is a folder, expected a file name");
  const std::string folder = parent_folder(path);
  make_dirs(folder, key);
  if (file_exists(path) && ::access(path.c_str(), W_OK) != 0)
    fail_input(key, "cannot write ", path, ": ", std::strerror(errno));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path, "cannot open: ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace gpt2
