#pragma once
// Files written so that a crash never leaves a half-written one: data goes to "<path>.tmp.<pid>",
// is flushed to disk, and only then renamed over <path> (rename is atomic on POSIX file systems).
#include <cstddef>
#include <cstdio>
#include <string>

namespace gpt2 {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // InputError if the folder is not writable
  ~AtomicFile();                                  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t bytes);
  void patch(long offset, const void* data, size_t bytes);  // overwrite earlier bytes, then seek to end
  void commit();  // fsync + rename
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
size_t file_size(const std::string& path);  // 0 when missing
// An output folder, made (mkdir -p) when missing; InputError naming `key` when it or a parent is
// a file, or it cannot be created or written.
void make_dirs(const std::string& path, const std::string& key);
// An output file: its folder made as make_dirs does; InputError naming `key` when the path is a
// folder, or the folder or an existing file there is not writable. Creates no file.
void prepare_output_file(const std::string& path, const std::string& key);
std::string parent_folder(const std::string& path);  // "." when the path names none
bool writable_folder(const std::string& path);       // an existing folder this process may write in
std::string read_file(const std::string& path);  // InputError if unreadable

}  // namespace gpt2
