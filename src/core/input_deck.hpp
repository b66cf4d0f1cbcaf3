#pragma once
// TOML input decks bound to plain structs. A deck is a TOML file with [section] tables; every key must
// be declared by the program (bind), so typos and wrong types are errors that name the key.
// `--set section.key=value` overrides are applied to the TOML before binding. A deck may begin with
// `base = "other.toml"` (relative to its folder) and then hold only what differs from it.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/choice.hpp"

namespace gpt2 {

struct DeckField {
  std::string key;  // "section.name"
  std::variant<int*, int64_t*, double*, bool*, std::string*, std::vector<int>*, Word*> dst;  // Word: a Choice<E>
  std::string help;
};

class InputDeck {
 public:
  // Reads and parses a TOML file; InputError names the file (and line) on failure.
  static InputDeck from_file(const std::string& path);
  static InputDeck from_string(const std::string& text, const std::string& source);

  // "section.key=value"; value is parsed as TOML, else taken as a string.
  void set(const std::string& assignment);

  // Writes every present key into its field; unknown keys, non-table sections and wrong types throw
  // InputError naming the key (with a suggestion for near misses). Absent keys keep their defaults.
  // ignore_unknown: take only the listed keys (a reader of a few keys of a deck this program
  // wrote, e.g. a trace's /meta config).
  void bind(const std::vector<DeckField>& fields, bool ignore_unknown = false) const;

  const std::string& source() const { return source_; }

  // The values the fields hold now, as a TOML document (sections in field order).
  static std::string to_toml(const std::vector<DeckField>& fields);

 private:
  InputDeck() = default;
  std::string source_;
  std::string text_;                        // original text + overrides appended as TOML
  std::vector<std::string> overrides_;      // "section.key=value" in order
};

}  // namespace gpt2
