#pragma once
// One registry per strategy type (communicator backends, pipeline schedules, optimizers,
// learning-rate schedules, tokenizers). Each implementation in modules/ registers itself from its
// own file with a static object -- name, one-line help, listing order, factory -- as the Kokkos
// mini-apps' modules_*.h do; the engine's factories, the configuration checks, the CLI's allowed
// values and `gpt2 info --keys` all read the one table, so a new strategy is one new file.
//
//   namespace { const bool registered = Registry<ScheduleEntry>::add({"gpipe", "...", 1, gpipe}); }
//
// Entry types carry at least `std::string name, help; int order;`.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace gpt2 {

template <class Entry>
class Registry {
 public:
  // Returns true, for use in a static initializer. A second entry of the same name is an error in
  // the program (two files claiming one name), reported at first use.
  static bool add(Entry e) {
    auto& v = table();
    for (const Entry& x : v)
      if (x.name == e.name) duplicate() = e.name;
    v.insert(std::upper_bound(v.begin(), v.end(), e,
                              [](const Entry& a, const Entry& b) { return a.order < b.order; }),
             std::move(e));
    return true;
  }
  // An entry made at run time (a schedule read from a file): replaces the one of the same name.
  static void put(Entry e) {
    auto& v = table();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const Entry& x) { return x.name == e.name; }), v.end());
    add(std::move(e));
  }
  static const Entry* find(const std::string& name) {
    check_unique();
    for (const Entry& e : table())
      if (e.name == name) return &e;
    return nullptr;
  }
  // The entry called `name`; InputError naming `key` and the choices otherwise.
  static const Entry& get(const std::string& name, const std::string& key) {
    if (const Entry* e = find(name)) return *e;
    fail_input(key, "expected ", choices(), ", got ", name.empty() ? "\"\"" : name);
  }
  static void check(const std::string& name, const std::string& key) { get(name, key); }
  static const std::vector<Entry>& entries() {
    check_unique();
    return table();
  }
  static std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const Entry& e : entries()) out.push_back(e.name);
    return out;
  }
  // "naive, gpipe or 1f1b"
  static std::string choices() {
    std::string s;
    const auto& v = entries();
    for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i].name;
    return s.empty() ? "(none registered)" : s;
  }
  // "naive | gpipe | 1f1b", for help texts
  static std::string alternatives() {
    std::string s;
    for (const Entry& e : entries()) s += (s.empty() ? "" : " | ") + e.name;
    return s;
  }

 private:
  static std::vector<Entry>& table() {
    static std::vector<Entry> v;
    return v;
  }
  static std::string& duplicate() {
    static std::string d;
    return d;
  }
  static void check_unique() {
    if (!duplicate().empty()) fail("registry: two implementations are registered as \"", duplicate(), "\"");
  }
};

}  // namespace gpt2
