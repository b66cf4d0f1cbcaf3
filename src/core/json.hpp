#pragma once
// A small JSON writer for machine-readable command output (`gpt2 info --json`, the performance
// model's reports): values are appended in order, strings escaped, numbers printed so that they
// read back exactly.
//   Json j; j.begin_object(); j.key("dp").value(2); j.key("names").begin_array(); ... j.end();
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpt2 {

class Json {
 public:
  Json& begin_object() { return open('{'); }
  Json& begin_array() { return open('['); }
  Json& end() {
    const char c = stack_.back() == '{' ? '}' : ']';
    stack_.pop_back();
    out_ += c;
    first_ = false;
    return *this;
  }
  Json& key(const std::string& k) {
    separate();
    string(k);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  Json& value(const std::string& s) {
    separate();
    string(s);
    return *this;
  }
  Json& value(const char* s) { return value(std::string(s)); }
  Json& value(bool b) { return raw(b ? "true" : "false"); }
  Json& value(int v) { return raw(std::to_string(v)); }
  Json& value(long v) { return raw(std::to_string(v)); }
  Json& value(long long v) { return raw(std::to_string(v)); }
  Json& value(unsigned long v) { return raw(std::to_string(v)); }
  Json& value(unsigned long long v) { return raw(std::to_string(v)); }
  Json& value(double v) {
    if (!std::isfinite(v)) return raw("null");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return raw(buf);
  }
  template <class T>
  Json& value(const std::vector<T>& v) {
    return values(v);
  }
  template <class T>
  Json& values(const std::vector<T>& v) {
    begin_array();
    for (const T& x : v) value(x);
    return end();
  }
  const std::string& str() const { return out_; }

 private:
  Json& open(char c) {
    separate();
    out_ += c;
    stack_.push_back(c);
    first_ = true;
    return *this;
  }
  Json& raw(const std::string& s) {
    separate();
    out_ += s;
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!stack_.empty() && !first_) out_ += ", ";
    first_ = false;
  }
  void string(const std::string& s) {
    out_ += '"';
    for (char c : s) {
      const unsigned char u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') out_ += '\\', out_ += c;
      else if (c == '\n') out_ += "\\n";
      else if (c == '\t') out_ += "\\t";
      else if (u < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(u));
        out_ += buf;
      } else out_ += c;
    }
    out_ += '"';
  }
  std::string out_;
  std::vector<char> stack_;
  bool first_ = true, after_key_ = false;
};

}  // namespace gpt2
