#include "pipeline/schedule_file.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace gpt2 {

namespace {
const char* kKey = "parallel.schedule_file";

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// A non-negative integer, the whole of `s`; -1 otherwise.
int number(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoi(s);
}

std::string stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

struct Parser {
  const std::string& path;
  int line = 0;
  template <class... Parts>
  [[noreturn]] void error(const Parts&... parts) const {
    fail_input(kKey, path, ":", line, ": ", parts...);
  }
  // F3, B0.1, W12.2, BW3.1 (a whole backward where a file splits the others)
  Action pass(const std::string& tok) const {
    const bool whole = tok.rfind("BW", 0) == 0;
    const char k = tok.empty() ? ' ' : tok[0];
    const ActionKind kind = whole ? ActionKind::backward
                            : k == 'F' ? ActionKind::forward
                            : k == 'B' ? ActionKind::backward_input
                                       : ActionKind::backward_weight;
    const size_t at = whole ? 2 : 1, dot = tok.find('.');
    const int mb = number(tok.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    const int chunk = dot == std::string::npos ? 0 : number(tok.substr(dot + 1));
    if ((k != 'F' && k != 'B' && k != 'W') || mb < 0 || chunk < 0)
      error("expected a pass such as F3, B3, W3.1 or BW3.1 (F, B, W or BW, the microbatch, .chunk when a rank has "
            "several), got \"",
            tok, "\"");
    return {kind, mb, -1, chunk};
  }
  // One token of a rank's line: a pass, or two joined by + (a pair: F3.0+B1.1).
  void passes(const std::string& tok, std::vector<Action>& out, int& pairs) const {
    const size_t plus = tok.find('+');
    if (plus == std::string::npos) {
      out.push_back(pass(tok));
      return;
    }
    Action a = pass(tok.substr(0, plus)), b = pass(tok.substr(plus + 1));
    if (a.kind != ActionKind::forward || b.kind == ActionKind::forward || b.kind == ActionKind::backward_weight)
      error("a pair is a forward and a backward (F3.0+B1.1), got \"", tok, "\"");
    a.pair = b.pair = ++pairs;
    out.push_back(a);
    out.push_back(b);
  }
  // "rank N: passes"
  void rank_line(const std::string& l, size_t colon, std::map<int, std::vector<Action>>& ranks) const {
    const int r = number(trim(l.substr(4, colon - 4)));
    if (r < 0) error("expected \"rank N: passes\", got \"", l, "\"");
    if (ranks.count(r)) error("rank ", r, " is listed twice");
    std::vector<Action>& out = ranks[r];
    std::istringstream tokens(l.substr(colon + 1));
    int pairs = 0;
    for (std::string tok; tokens >> tok;) passes(tok, out, pairs);
    if (out.empty()) error("rank ", r, " has no passes");
  }
};

// What the lines of a file say: its settings and each rank's passes.
struct FileLines {
  std::string name, placement = "loop";
  int chunks = 0;  // 0: not given
  std::map<int, std::vector<Action>> ranks;
};

// "key = value": name, placement or chunks.
void setting(const Parser& ps, const std::string& key, const std::string& value, FileLines& out) {
  if (key == "name") {
    const bool ok = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!ok) ps.error("name: expected letters, digits, '-', '_' or '.', got \"", value, "\"");
    out.name = value;
  } else if (key == "placement") {
    if (value != "loop" && value != "vee") ps.error("placement: expected loop or vee, got \"", value, "\"");
    out.placement = value;
  } else if (key == "chunks") {
    out.chunks = number(value);
    if (out.chunks < 1 || out.chunks > 64) ps.error("chunks: expected a whole number from 1 to 64, got \"", value, "\"");
  } else {
    ps.error("unknown setting \"", key, "\" (expected name, placement or chunks)");
  }
}

FileLines read_lines(const std::string& path, const std::string& text) {
  FileLines out;
  out.name = stem(path);
  Parser ps{path};
  std::istringstream in(text);
  for (std::string raw; std::getline(in, raw);) {
    ++ps.line;
    const std::string l = trim(raw.substr(0, raw.find('#')));
    if (l.empty()) continue;
    const size_t colon = l.find(':'), eq = l.find('=');
    if (l.rfind("rank", 0) == 0 && colon != std::string::npos) ps.rank_line(l, colon, out.ranks);
    else if (eq != std::string::npos) setting(ps, trim(l.substr(0, eq)), trim(l.substr(eq + 1)), out);
    else ps.error("expected \"rank N: passes\" or a setting (name, placement, chunks), got \"", l, "\"");
  }
  return out;
}

template <class... Parts>
[[noreturn]] void fail_file(const std::string& path, const Parts&... parts) {
  fail_input(kKey, path, ": ", parts...);
}

// The microbatches (the highest one run, plus one); whether a backward is split (a W pass).
void count_microbatches(const std::map<int, std::vector<Action>>& ranks, ScheduleFile& f) {
  int m = 0;
  for (const auto& [r, passes] : ranks)
    for (const Action& a : passes) {
      m = std::max(m, a.mb + 1);
      if (a.chunk >= f.placement.chunks)
        fail_file(f.path, "rank ", r, " runs chunk ", a.chunk, ", but ranks have ", f.placement.chunks, " (set chunks)");
      f.split_backward = f.split_backward || a.kind == ActionKind::backward_weight;
    }
  if (m > 4096) fail_file(f.path, "microbatch ", m - 1, " is past the limit of 4096 microbatches");
  f.microbatches = m;
}

// Rank r runs each microbatch through each of its chunks once: F, then B, then W if split (a B in
// a file without W is a whole backward).
void check_rank_passes(int r, std::vector<Action>& passes, const ScheduleFile& f) {
  static const char* names[] = {"F", "B", "W"};
  const int m = f.microbatches;
  std::vector<std::vector<int>> seen(size_t(f.placement.chunks), std::vector<int>(size_t(m), 0));  // passes done
  for (Action& a : passes) {
    if (!f.split_backward && a.kind == ActionKind::backward_input) a.kind = ActionKind::backward;  // no W: whole
    const int step = a.kind == ActionKind::forward ? 0 : a.kind == ActionKind::backward_weight ? 2 : 1;
    const int after = a.kind == ActionKind::backward && f.split_backward ? 3 : step + 1;  // BW: B and W at once
    int& done = seen[size_t(a.chunk)][size_t(a.mb)];
    const std::string what = std::string(names[step]) + std::to_string(a.mb) + "." + std::to_string(a.chunk);
    if (done > step) fail_file(f.path, "rank ", r, " runs ", what, " twice");
    if (done < step) fail_file(f.path, "rank ", r, " runs ", what, " before ", names[done], a.mb, ".", a.chunk);
    done = after;
  }
  const int full = f.split_backward ? 3 : 2;
  for (int c = 0; c < f.placement.chunks; ++c)
    for (int mb = 0; mb < m; ++mb)
      if (seen[size_t(c)][size_t(mb)] != full)
        fail_file(f.path, "rank ", r, " never runs ", names[seen[size_t(c)][size_t(mb)]], mb, ".", c,
                  " (every rank runs F, B", f.split_backward ? " and W" : "", " of every microbatch, ", m,
                  " of them, through each of its chunks)");
}
}  // namespace

ScheduleFile parse_schedule_file(const std::string& path, const std::string& text) {
  FileLines lines = read_lines(path, text);
  ScheduleFile f;
  f.path = path;
  f.name = lines.name;
  if (lines.ranks.empty()) fail_file(path, "no \"rank N: passes\" lines: expected one per pipeline rank");
  const int p = int(lines.ranks.size());
  if (lines.ranks.rbegin()->first != p - 1)
    fail_file(path, "expected lines for ranks 0 to ", p - 1, ", got a line for rank ", lines.ranks.rbegin()->first);
  f.placement.kind = lines.placement == "vee" ? Placement::Kind::vee : Placement::Kind::loop;
  f.placement.ranks = p;
  f.placement.chunks = lines.chunks ? lines.chunks : lines.placement == "vee" ? 2 : 1;
  if (lines.placement == "vee" && f.placement.chunks != 2)
    fail_file(path, "placement vee runs 2 chunks per rank, got chunks = ", lines.chunks);
  count_microbatches(lines.ranks, f);
  for (auto& [r, passes] : lines.ranks) {
    check_rank_passes(r, passes, f);
    f.compute.push_back(passes);
  }
  return f;
}

ScheduleFile read_schedule_file(const std::string& path) {
  if (path.empty()) fail_input(kKey, "is empty: expected the path of a schedule file");
  if (!file_exists(path) || is_directory(path)) fail_input(kKey, "expected a schedule file, got ", path, " (no such file)");
  return parse_schedule_file(path, read_file(path));
}

std::string format_schedule_file(const std::string& name, const Placement& pl,
                                 const std::vector<std::vector<Action>>& per_rank) {
  std::ostringstream os;
  os << "# " << name << ": " << pl.ranks << " pipeline ranks; F forward, B backward"
     << " (input gradients when the file has W passes), W weight gradients, BW a whole backward among split"
     << " ones, F+B a pair; microbatch.chunk\n";
  os << "name = " << name << "-custom\n";
  os << "placement = " << (pl.kind == Placement::Kind::vee ? "vee" : "loop") << "\n";
  os << "chunks = " << pl.chunks << "\n";
  bool split = false;
  for (const auto& passes : per_rank)
    for (const Action& a : passes) split = split || a.kind == ActionKind::backward_weight;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    os << "rank " << r << ":";
    int open_pair = 0;
    for (const Action& a : per_rank[r]) {
      if (!is_compute(a.kind)) continue;
      os << (a.pair && a.pair == open_pair ? "+" : " ");
      open_pair = a.pair && a.pair != open_pair ? a.pair : 0;
      os << (a.kind == ActionKind::forward           ? "F"
             : a.kind == ActionKind::backward_weight ? "W"
             : a.kind == ActionKind::backward && split ? "BW"
                                                       : "B")
         << a.mb;
      if (pl.chunks > 1) os << '.' << a.chunk;
    }
    os << "\n";
  }
  return os.str();
}

std::string register_schedule_file(const ScheduleFile& f) {
  if (const ScheduleEntry* e = ScheduleRegistry::find(f.name); e && e->file.empty())
    fail_input(kKey, f.path, ": name \"", f.name, "\" is a built-in schedule's; choose another (name = ...)");
  ScheduleEntry e;
  e.name = f.name;
  e.help = "read from " + f.path;
  e.order = 1000;
  e.placement = f.placement.kind;
  e.chunks = f.placement.chunks;
  e.split_backward = f.split_backward;
  e.file = f.path;
  e.stages = f.placement.ranks;
  e.microbatches = f.microbatches;
  const std::vector<std::vector<Action>> lists = with_communication(f.compute, f.placement);
  e.make = [lists, m = f.microbatches, path = f.path](const ScheduleShape& s) {
    if (s.stages != int(lists.size()) || s.microbatches != m)
      fail_input(kKey, path, " is written for ", lists.size(), " pipeline ranks and ", m, " microbatches, not ", s.stages,
                 " and ", s.microbatches);
    return lists[size_t(s.stage)];
  };
  ScheduleRegistry::put(std::move(e));
  return f.name;
}

}  // namespace gpt2
