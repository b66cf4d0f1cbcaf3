#pragma once
// Errors a user can act on. An InputError names the input (file, config key, flag) and what was
// expected; the app prints it once and every rank exits non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpt2 {

class InputError : public std::runtime_error {
 public:
  InputError(const std::string& input, const std::string& what)
      : std::runtime_error(input + ": " + what), input_(input) {}
  const std::string& input() const { return input_; }

 private:
  std::string input_;
};

// Builds a message from stream-able parts: fail_input("data.train", "expected a shard, got ", p).
template <class... Parts>
[[noreturn]] void fail_input(const std::string& input, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw InputError(input, os.str());
}

// A write that failed while the program ran (a full disk, a quota, a file-size limit): a failure,
// not bad input -- exit status 1, the file and the reason named, no partial file left.
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Parts>
[[noreturn]] void fail_write(const std::string& path, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw WriteError(path + ": " + os.str());
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw std::runtime_error(os.str());
}

}  // namespace gpt2
