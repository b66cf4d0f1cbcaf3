#pragma once
// A minimal JSON reader for GPT-2's encoder.json: one flat object of string -> integer. Errors are
// InputErrors naming the file and the byte offset.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpt2 {

class FlatJsonReader {
 public:
  FlatJsonReader(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  // Calls fn(code points of the key, value) for each member.
  template <class Fn>
  void read_object(Fn&& fn) {
    ws();
    expect('{');
    ws();
    if (peek() == '}') {
      ++i_;
      return;
    }
    std::vector<uint32_t> key;
    while (true) {
      ws();
      read_string(key);
      ws();
      expect(':');
      ws();
      const long long v = read_int();
      fn(key, v);
      ws();
      const char c = get();
      if (c == '}') break;
      if (c != ',') error("expected ',' or '}'");
    }
    ws();
    if (i_ != s_.size()) error("unexpected text after the JSON object");
  }

 private:
  [[noreturn]] void error(const char* what) const;
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  char get() {
    if (i_ >= s_.size()) error("unexpected end of file");
    return s_[i_++];
  }
  void expect(char c);
  void ws();
  uint32_t hex4();
  void read_string(std::vector<uint32_t>& cps);
  long long read_int();

  std::string_view s_;
  const std::string& name_;
  size_t i_ = 0;
};

}  // namespace gpt2
