#include "core/input_deck.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace gpt2 {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<DeckField>& fields) {
  std::string best;
  size_t best_d = 4;
  for (const auto& f : fields) {
    const size_t d = edit_distance(key, f.key);
    if (d < best_d) best_d = d, best = f.key;
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// "fp32, bf16 or fp16"; a list that a boolean reads into quotes its other words: true, false or "auto".
std::string word_list(const Word& w) {
  const bool booleans = w.has_word("true") || w.has_word("false");
  std::string out;
  for (size_t i = 0; i < w.words().size(); ++i) {
    const std::string x = w.words()[i];
    out += (i == 0 ? "" : i + 1 == w.words().size() ? " or " : ", ") + (booleans && !is_bool_word(x) ? '"' + x + '"' : x);
  }
  return out;
}

// A choice's value: one of its words (a TOML boolean is the word "true" or "false").
void bind_word(Word& dst, const std::string& key, const toml::node& v) {
  std::string text;
  if (v.is_string()) text = *v.value<std::string>();
  else if (v.is_boolean() && dst.has_word("true")) text = *v.value<bool>() ? "true" : "false";
  else fail_input(key, "expected ", word_list(dst), ", got ", type_name(v));
  if (!dst.assign(text)) fail_input(key, "expected ", word_list(dst), ", got \"", text, "\"");
}

// A TOML basic string: quotes, backslashes and control characters (which TOML forbids raw) escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(u));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// True if s is UTF-8 as TOML requires (no overlongs, surrogates or code points above U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

toml::table parse(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " (line " << e.source().begin.line << ")";
    throw InputError(source, os.str());
  }
}

// Parses the value of one override the way TOML would, falling back to a plain string so that
// `--set data.train=data/x/train_*.bin` needs no quotes.
toml::table override_table(const std::string& key, const std::string& value) {
  const std::string sec = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
  try {
    return toml::parse("[" + sec + "]\n" + name + " = " + value + "\n");
  } catch (const toml::parse_error&) {
  }
  // Taken as a string, it must be one TOML can hold (the effective configuration is written as TOML).
  if (!valid_utf8(value)) fail_input("--set " + key + "=" + value, "the value is not UTF-8 text");
  toml::table t;
  t.insert(sec, toml::table{{name, value}});
  return t;
}

}  // namespace

InputDeck InputDeck::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path, "cannot open the input deck (expected a readable TOML file)");
  std::ostringstream os;
  os << in.rdbuf();
  return from_string(os.str(), path);
}

InputDeck InputDeck::from_string(const std::string& text, const std::string& source) {
  InputDeck d;
  d.source_ = source;
  d.text_ = text;
  parse(text, source);  // report syntax errors now
  return d;
}

void InputDeck::set(const std::string& assignment) {
  const size_t eq = assignment.find('='), dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
    fail_input("--set " + assignment, "expected section.key=value, e.g. train.lr=3e-4");
  overrides_.push_back(assignment);
}

namespace {
// Copies every key of `from`'s sections into `into` (later values win).
void merge_sections(toml::table& into, const toml::table& from, const std::string& source) {
  for (auto&& [sec, tbl] : from) {
    if (!tbl.is_table()) continue;  // reported by bind
    if (!into.contains(sec.str())) into.insert(sec.str(), toml::table{});
    toml::table* dst = into[sec.str()].as_table();
    if (!dst) fail_input(std::string(sec.str()), "is not a [section] in ", source);
    for (auto&& [k, v] : *tbl.as_table()) dst->insert_or_assign(k.str(), v);
  }
}

// The canonical path of an existing file (symbolic links and ".." resolved), else the path as given.
std::string canonical(const std::string& path) {
  char* r = ::realpath(path.c_str(), nullptr);
  if (!r) return path;
  std::string s(r);
  std::free(r);
  return s;
}

// A deck may start from another: `base = "shakespeare.toml"` (relative to the deck's folder) at
// the top, then override what differs. Bases may chain (up to 8 deep); `chain` holds the decks
// that led here, so a deck that is its own base (directly or further up) is named as such.
toml::table resolve_base(toml::table deck, const std::string& source, std::vector<std::string> chain = {}) {
  const toml::node* b = deck.get("base");
  if (!b) return deck;
  if (!b->is_string()) fail_input(source, "base: expected the path of another deck, got ", type_name(*b));
  if (chain.size() >= 8) fail_input(source, "base: decks chained more than 8 deep");
  std::string path = *b->value<std::string>();
  if (path.empty()) fail_input(source, "base: is empty, expected the path of another deck");
  const size_t slash = source.rfind('/');
  if (!path.empty() && path[0] != '/' && slash != std::string::npos) path = source.substr(0, slash + 1) + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    fail_input(source, "base: ", path, " is a folder, expected another deck (a TOML file)");
  chain.push_back(canonical(source));
  const std::string target = canonical(path);
  for (size_t i = 0; i < chain.size(); ++i)
    if (chain[i] == target)
      fail_input(source, "base: ", path, i + 1 == chain.size() ? " is this deck itself" : " is a deck that leads here (a cycle)",
                 ", expected another deck");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(source, "base: cannot open ", path);
  std::ostringstream text;
  text << in.rdbuf();
  toml::table root = resolve_base(parse(text.str(), path), path, chain);
  deck.erase("base");
  merge_sections(root, deck, source);
  return root;
}
}  // namespace

void InputDeck::bind(const std::vector<DeckField>& fields, bool ignore_unknown) const {
  toml::table root = resolve_base(parse(text_, source_), source_);
  for (const std::string& a : overrides_) {
    const size_t eq = a.find('=');
    merge_sections(root, override_table(a.substr(0, eq), a.substr(eq + 1)), source_);
  }
  std::map<std::string, const DeckField*> by_key;
  for (const auto& f : fields) by_key[f.key] = &f;
  for (auto&& [sec, node] : root) {
    const std::string section(sec.str());
    const toml::table* tbl = node.as_table();
    if (!tbl) fail_input(section, "expected a [", section, "] table, got ", type_name(node));
    for (auto&& kv : *tbl) {  // not a structured binding: lambdas below use v (C++20 for those)
      const toml::node& v = kv.second;
      const std::string key = section + "." + std::string(kv.first.str());
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        if (ignore_unknown) continue;
        fail_input(key, "unknown configuration key", suggestion(key, fields));
      }
      std::visit(
          [&](auto* dst) {
            using D = std::remove_pointer_t<decltype(dst)>;
            auto wrong = [&](const char* expected) {
              fail_input(key, "expected ", expected, ", got ", type_name(v));
            };
            if constexpr (std::is_same_v<D, bool>) {
              if (!v.is_boolean()) wrong("true or false");
              *dst = *v.value<bool>();
            } else if constexpr (std::is_same_v<D, int> || std::is_same_v<D, int64_t>) {
              if (!v.is_integer()) wrong("an integer");
              const int64_t x = *v.value<int64_t>();
              if constexpr (std::is_same_v<D, int>)
                if (x < INT32_MIN || x > INT32_MAX) fail_input(key, "integer out of range: ", x);
              *dst = D(x);
            } else if constexpr (std::is_same_v<D, double>) {
              if (!v.is_number()) wrong("a number");
              *dst = *v.value<double>();
            } else if constexpr (std::is_same_v<D, std::string>) {
              if (!v.is_string()) wrong("a string");
              *dst = *v.value<std::string>();
            } else if constexpr (std::is_same_v<D, Word>) {
              bind_word(*dst, key, v);
            } else {
              const toml::array* arr = v.as_array();
              if (!arr) wrong("an array of integers");
              dst->clear();
              for (auto&& e : *arr) {
                if (!e.is_integer()) wrong("an array of integers");
                const int64_t x = *e.value<int64_t>();
                if (x < INT32_MIN || x > INT32_MAX) fail_input(key, "integer out of range: ", x);
                dst->push_back(int(x));
              }
            }
          },
          it->second->dst);
    }
  }
}

std::string InputDeck::to_toml(const std::vector<DeckField>& fields) {
  std::ostringstream os;
  std::string section;
  for (const auto& f : fields) {
    const std::string sec = f.key.substr(0, f.key.find('.')), name = f.key.substr(f.key.find('.') + 1);
    if (sec != section) os << (section.empty() ? "" : "\n") << "[" << sec << "]\n", section = sec;
    os << name << " = ";
    std::visit(
        [&](auto* v) {
          using D = std::remove_pointer_t<decltype(v)>;
          if constexpr (std::is_same_v<D, bool>) os << (*v ? "true" : "false");
          else if constexpr (std::is_same_v<D, std::string>) os << quoted(*v);
          else if constexpr (std::is_same_v<D, Word>)
            os << (is_bool_word(v->text()) ? std::string(v->text()) : quoted(v->text()));
          else if constexpr (std::is_same_v<D, double>) {
            std::string s;
            for (int prec = 6; prec <= 17; ++prec) {  // shortest text that reads back exactly
              std::ostringstream num;
              num.precision(prec);
              num << *v;
              s = num.str();
              if (std::strtod(s.c_str(), nullptr) == *v) break;  // (std::stod throws on subnormals)
            }
            if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
            os << s;
          } else if constexpr (std::is_same_v<D, std::vector<int>>) {
            os << "[";
            for (size_t i = 0; i < v->size(); ++i) os << (i ? ", " : "") << (*v)[i];
            os << "]";
          } else os << *v;
        },
        f.dst);
    os << "\n";
  }
  return os.str();
}

}  // namespace gpt2
