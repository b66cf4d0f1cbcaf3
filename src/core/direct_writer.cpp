#include "core/direct_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpt2 {

DirectWriter::DirectWriter(const std::string& path, size_t buffer_bytes)
    : buffer_bytes_(std::max(kBlock, buffer_bytes / kBlock * kBlock)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) {
    error_ = std::string("cannot open it for writing: ") + std::strerror(errno);
    return;
  }
  direct_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);  // (-1: the page cache only)
  if (direct_fd_ < 0) return;
  for (char*& b : buffers_) {
    b = static_cast<char*>(std::aligned_alloc(kBlock, buffer_bytes_));
    if (!b) {
      error_ = "out of memory for the write buffers";
      return;
    }
  }
  thread_ = std::thread([this] { writer_loop(); });
}

DirectWriter::~DirectWriter() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (char* b : buffers_) std::free(b);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

std::string DirectWriter::pwrite_all(int fd, const char* data, size_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, off_t(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return std::string("write failed: ") + (w < 0 ? std::strerror(errno) : "no progress");
    data += w, n -= size_t(w), at += uint64_t(w);
  }
  return "";
}

void DirectWriter::writer_loop() {
  for (;;) {
    int b;
    size_t n;
    uint64_t at;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [this] { return stop_ || queued_ >= 0; });
      if (queued_ < 0) return;  // stopped with nothing left
      b = queued_, n = queued_bytes_, at = queued_at_;
      queued_ = -1;
    }
    cv_.notify_all();  // the queue slot is free
    const std::string failed = pwrite_all(direct_fd_, buffers_[b], n, at);
    {
      std::lock_guard<std::mutex> lock(m_);
      if (thread_error_.empty()) thread_error_ = failed;
      busy_[b] = false;
    }
    cv_.notify_all();
  }
}

char* DirectWriter::next_buffer() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [this] { return !busy_[next_]; });
  busy_[next_] = true;
  return buffers_[next_];
}

void DirectWriter::write(uint64_t offset, size_t bytes, const Fill& fill) {
  if (!error_.empty() || bytes == 0) return;
  bytes_ += bytes;
  const uint64_t end = offset + bytes;
  const uint64_t a = (offset + kBlock - 1) / kBlock * kBlock, e = end / kBlock * kBlock;
  // The ends (or all of a run that covers no whole block) through the page cache.
  auto buffered = [&](uint64_t from, uint64_t to) {
    char small[kBlock];
    for (uint64_t at = from; at < to && error_.empty();) {
      const size_t n = size_t(std::min<uint64_t>(to - at, kBlock));
      fill(small, size_t(at - offset), n);
      error_ = pwrite_all(fd_, small, n, at);
      at += n;
    }
  };
  if (direct_fd_ < 0 || e <= a) {
    buffered(offset, end);
    return;
  }
  buffered(offset, a);
  for (uint64_t at = a; at < e && error_.empty();) {
    const size_t n = size_t(std::min<uint64_t>(e - at, buffer_bytes_));
    char* buf = next_buffer();
    fill(buf, size_t(at - offset), n);
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [this] { return queued_ < 0; });
      queued_ = next_, queued_bytes_ = n, queued_at_ = at;
    }
    cv_.notify_all();
    next_ = 1 - next_;
    at += n;
  }
  buffered(e, end);
}

const std::string& DirectWriter::finish() {
  if (thread_.joinable()) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return queued_ < 0 && !busy_[0] && !busy_[1]; });
    if (error_.empty()) error_ = thread_error_;
  }
  if (error_.empty() && fd_ >= 0 && ::fdatasync(fd_) != 0) error_ = std::string("fdatasync failed: ") + std::strerror(errno);
  return error_;
}

}  // namespace gpt2
