#include "core/direct_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace gpt2 {

namespace {
std::string pwrite_all(int fd, const char* data, size_t n, uint64_t at) {  // "" or the failure
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, off_t(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return std::string("write failed: ") + (w < 0 ? std::strerror(errno) : "no progress");
    data += w, n -= size_t(w), at += uint64_t(w);
  }
  return "";
}
}  // namespace

// Two aligned buffers and a thread that writes each, once the caller has filled it, to its place in
// the file: the caller fills one while the other goes to the disk.
class DirectWriter::Pipe {
 public:
  Pipe(int fd, size_t buffer_bytes) : fd_(fd) {
    for (char*& b : buffers_) b = static_cast<char*>(std::aligned_alloc(kBlock, buffer_bytes));
    if (ok()) thread_ = std::thread([this] { loop(); });
  }
  ~Pipe() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (char* b : buffers_) std::free(b);
  }
  bool ok() const { return buffers_[0] && buffers_[1]; }
  char* take() {  // a free buffer (waits for the thread to give one back)
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return !busy_[next_]; });
    busy_[next_] = true;
    return buffers_[next_];
  }
  void submit(size_t n, uint64_t at) {  // the buffer last taken: n bytes to offset `at`
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [this] { return queued_ < 0; });
      queued_ = next_, queued_bytes_ = n, queued_at_ = at;
    }
    cv_.notify_all();
    next_ = 1 - next_;
  }
  std::string drain() {  // waits for every write; the first failure ("" when none)
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return queued_ < 0 && !busy_[0] && !busy_[1]; });
    return error_;
  }

 private:
  void loop();

  int fd_;
  char* buffers_[2] = {nullptr, nullptr};
  int next_ = 0;
  // The buffer handed to the thread: its bytes and where they go.
  std::mutex m_;
  std::condition_variable cv_;
  bool busy_[2] = {false, false};
  int queued_ = -1;  // buffer index waiting for the thread, or -1
  size_t queued_bytes_ = 0;
  uint64_t queued_at_ = 0;
  bool stop_ = false;
  std::string error_;  // the thread's first failure (under m_)
  std::thread thread_;
};

void DirectWriter::Pipe::loop() {
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
    const std::string failed = pwrite_all(fd_, buffers_[b], n, at);
    {
      std::lock_guard<std::mutex> lock(m_);
      if (error_.empty()) error_ = failed;
      busy_[b] = false;
    }
    cv_.notify_all();
  }
}

DirectWriter::DirectWriter(const std::string& path, size_t buffer_bytes)
    : buffer_bytes_(std::max(kBlock, buffer_bytes / kBlock * kBlock)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) {
    error_ = std::string("cannot open it for writing: ") + std::strerror(errno);
    return;
  }
  direct_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);  // (-1: the page cache only)
  if (direct_fd_ < 0) return;
  pipe_ = std::make_unique<Pipe>(direct_fd_, buffer_bytes_);
  if (!pipe_->ok()) error_ = "out of memory for the write buffers";
}

DirectWriter::~DirectWriter() {
  pipe_.reset();  // (waits for the writes in flight)
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
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
    char* buf = pipe_->take();
    fill(buf, size_t(at - offset), n);
    pipe_->submit(n, at);
    at += n;
  }
  buffered(e, end);
}

const std::string& DirectWriter::finish() {
  if (pipe_ && pipe_->ok()) {
    const std::string failed = pipe_->drain();
    if (error_.empty()) error_ = failed;
  }
  if (error_.empty() && fd_ >= 0 && ::fdatasync(fd_) != 0) error_ = std::string("fdatasync failed: ") + std::strerror(errno);
  return error_;
}

}  // namespace gpt2
