#pragma once
// Writes runs of bytes at given offsets of an existing file at the disk's sequential rate. The part
// of each run that covers whole 4 KiB blocks goes through O_DIRECT from aligned buffers, which a
// thread of the writer's own writes while the caller fills the next one (the copy -- and whatever
// the caller does while copying, a checksum -- overlaps the disk); the unaligned ends (at most a
// block each side) go through the page cache. On this project's dev VM the page cache took writes
// at 0.2 GB/s and O_DIRECT at 1.8 GB/s (tests/bench/README.md). Where O_DIRECT is refused (tmpfs,
// some network file systems) every byte goes through the page cache.
//
// Several processes may write runs of one file at once: a block is written either whole through
// O_DIRECT by the one run that covers it, or in parts through the page cache by the runs that share
// it, never both.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gpt2 {

class DirectWriter {
 public:
  static constexpr size_t kBlock = 4096;
  // path: an existing file, written in place. buffer_bytes: each of the two aligned buffers.
  explicit DirectWriter(const std::string& path, size_t buffer_bytes = size_t(16) << 20);
  ~DirectWriter();  // waits for the writes in flight
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  // fill(dst, from, n): bytes [from, from + n) of the run into dst (from and n multiples of 4).
  using Fill = std::function<void(char* dst, size_t from, size_t n)>;
  void write(uint64_t offset, size_t bytes, const Fill& fill);
  // Waits for every write, then fdatasync. The first error ("" when none) says what failed.
  const std::string& finish();
  const std::string& error() const { return error_; }
  bool direct() const { return direct_fd_ >= 0; }  // O_DIRECT is in use
  size_t bytes() const { return bytes_; }          // written so far

 private:
  class Pipe;  // the two aligned buffers and the thread that writes them (direct_writer.cpp)

  int fd_ = -1, direct_fd_ = -1;
  size_t buffer_bytes_;
  std::unique_ptr<Pipe> pipe_;  // with O_DIRECT
  std::string error_;
  size_t bytes_ = 0;
};

}  // namespace gpt2
