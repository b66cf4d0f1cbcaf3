#pragma once
// Shared by the libFuzzer harnesses in tests/fuzz/ (see tests/fuzz/CMakeLists.txt and
// job_scripts/fuzz.sh). A harness feeds one input to one of our readers; the outcomes it accepts
// are success and the errors that reader documents: gpt2::InputError (bad input, named) and a plain
// std::runtime_error from fail(). Anything else is a finding: a crash or sanitizer report, a hang,
// an exception of another type (std::length_error, std::bad_alloc, std::out_of_range, a
// third-party parser's own exception leaking out, ...), or a property the harness checks failing.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "core/error.hpp"

namespace gpt2::fuzz {

// Reports a broken property and aborts (libFuzzer saves the input as crash-<sha1>).
template <class... Parts>
[[noreturn]] void finding(const Parts&... parts) {
  std::ostringstream msg;
  (msg << ... << parts);
  std::fprintf(stderr, "\n==FUZZ FINDING== %s\n", msg.str().c_str());
  std::abort();
}

// Runs f; returns true when it finished, false when it threw an expected error.
template <class F>
bool expect_only_input_errors(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const InputError&) {
    return false;
  } catch (const std::runtime_error& e) {
    // fail() throws exactly std::runtime_error; subclasses (std::range_error, std::system_error,
    // toml::parse_error, ...) are not errors our code means to report.
    if (typeid(e) != typeid(std::runtime_error))
      finding(what, ": unexpected exception ", typeid(e).name(), ": ", e.what());
    return false;
  } catch (const std::exception& e) {
    finding(what, ": unexpected exception ", typeid(e).name(), ": ", e.what());
  }
}

// Our readers take a path: each execution writes its input to one file per process, in /dev/shm
// where there is one (no disk traffic), else in $TMPDIR or /tmp.
class InputFile {
 public:
  explicit InputFile(const std::string& tag) {
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
    path_ = dir + "/gpt2-fuzz-" + tag + "-" + std::to_string(::getpid()) + ".bin";
  }
  ~InputFile() { std::remove(path_.c_str()); }
  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) finding("cannot write the fuzz input file ", path_);
    if (size && std::fwrite(data, 1, size, f) != size) finding("short write to ", path_);
    std::fclose(f);
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Readers must close what they open on every path, errors included. Declared first in a harness,
// this checks that the lowest free file descriptor is the same after the input as before it (a
// leaked descriptor takes it). Per input, because libFuzzer itself opens pipes between inputs (to
// the symbolizer that names NEW_FUNCs).
class FdLeakCheck {
 public:
  FdLeakCheck() : before_(lowest_free_fd()) {}
  ~FdLeakCheck() {
    if (lowest_free_fd() == before_) return;
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(before_);
    (void)!::readlink(link.c_str(), target, sizeof target - 1);
    finding("a file descriptor leaked: ", before_, " is still open (", target, ")");
  }

 private:
  static int lowest_free_fd() {
    const int fd = ::dup(2);
    ::close(fd);
    return fd;
  }
  int before_;
};

}  // namespace gpt2::fuzz
