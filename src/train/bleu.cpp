#include "train/bleu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "core/error.hpp"

namespace gpt2 {

namespace {
// Python's str.split() whitespace at the start of s[i..]: its length in bytes (UTF-8), or 0.
size_t space_at(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto cont = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  if (c == 0xc2 && (cont(1) == 0x85 || cont(1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c == 0xe1 && cont(1) == 0x9a && cont(2) == 0x80) return 3;      // U+1680
  if (c == 0xe2 && cont(1) == 0x80) {
    const unsigned d = cont(2);
    if ((d >= 0x80 && d <= 0x8a) || d == 0xa8 || d == 0xa9 || d == 0xaf) return 3;  // U+2000-200A, 2028, 2029, 202F
  }
  if (c == 0xe2 && cont(1) == 0x81 && cont(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && cont(1) == 0x80 && cont(2) == 0x80) return 3;  // U+3000
  return 0;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    if (const size_t n = space_at(s, i)) {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
      i += n;
    } else {
      cur += s[i++];
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

bool digit(char c) { return c >= '0' && c <= '9'; }

// The symbols mteval-v13a splits off: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
bool symbol(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return (u >= 0x7b && u <= 0x7e) || (u >= 0x5b && u <= 0x60) || (u >= 0x20 && u <= 0x26) || (u >= 0x28 && u <= 0x2b) ||
         (u >= 0x3a && u <= 0x40) || u == '/';
}

// A two-character pattern replaced left to right without overlaps, as a regular expression's
// substitution does: where match(a, b) holds, `a b` becomes emit(a, b).
template <class Match, class Emit>
std::string substitute_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string lower_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

std::string rstrip(std::string s) {
  while (!s.empty()) {
    size_t n = 0;
    // the last character's bytes: step back over UTF-8 continuation bytes
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    n = space_at(s, start);
    if (n == 0 || start + n != s.size()) break;
    s.erase(start);
  }
  return s;
}

std::string preprocess(const std::string& line, const BleuOptions& o) {
  std::string s = rstrip(o.lowercase ? lower_ascii(line) : line);
  if (o.tokenize == BleuTokenize::mteval_13a) return tokenize_13a(s);
  return s;  // none: the words are split on whitespace below
}

using Ngrams = std::map<std::vector<std::string>, long long>;
Ngrams ngrams_of(const std::vector<std::string>& w, int max_order) {
  Ngrams out;
  for (int n = 1; n <= max_order; ++n)
    for (size_t i = 0; i + size_t(n) <= w.size(); ++i) ++out[std::vector<std::string>(w.begin() + long(i), w.begin() + long(i) + n)];
  return out;
}

void check(const BleuOptions& o) {
  if (o.max_order < 1) fail_input("BLEU max_order", "must be >= 1, got ", o.max_order);
}
}  // namespace

std::string tokenize_13a(const std::string& input) {
  std::string line = input;
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";
  std::string s;
  s.reserve(line.size() * 2);
  for (char c : line) {
    if (symbol(c)) {
      s += ' ';
      s += c;
      s += ' ';
    } else {
      s += c;
    }
  }
  // a period or comma after a non-digit; then one before a non-digit; a dash after a digit
  s = substitute_pairs(
      s, [](char a, char b) { return !digit(a) && (b == '.' || b == ','); },
      [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  s = substitute_pairs(
      s, [](char a, char b) { return (a == '.' || a == ',') && !digit(b); },
      [](std::string& o, char a, char b) { o += ' ', o += a, o += ' ', o += b; });
  s = substitute_pairs(
      s, [](char a, char b) { return digit(a) && b == '-'; },
      [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  std::string out;
  for (const std::string& w : split_words(s)) out += (out.empty() ? "" : " ") + w;
  return out;
}

BleuStats bleu_segment_stats(const std::string& hyp, const std::vector<std::string>& refs, int max_order) {
  BleuStats st;
  st.correct.assign(size_t(max_order), 0);
  st.total.assign(size_t(max_order), 0);
  const std::vector<std::string> hw = split_words(hyp);
  const Ngrams h = ngrams_of(hw, max_order);
  Ngrams r;  // the largest count of each n-gram in any reference
  long long closest = -1, closest_diff = -1;
  st.sys_len = (long long)hw.size();
  for (const std::string& ref : refs) {
    const std::vector<std::string> rw = split_words(ref);
    for (const auto& [g, n] : ngrams_of(rw, max_order)) r[g] = std::max(r[g], n);
    const long long len = (long long)rw.size(), diff = std::llabs(st.sys_len - len);
    if (closest_diff < 0 || diff < closest_diff || (diff == closest_diff && len < closest)) closest = len, closest_diff = diff;
  }
  st.ref_len = closest < 0 ? 0 : closest;
  for (const auto& [g, n] : h) {
    const size_t order = g.size() - 1;
    st.total[order] += n;
    const auto it = r.find(g);
    if (it != r.end()) st.correct[order] += std::min(n, it->second);
  }
  return st;
}

BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& o) {
  check(o);
  const int N = o.max_order;
  const double value = o.smooth_value >= 0 ? o.smooth_value : o.smooth == BleuSmooth::floor ? 0.1 : o.smooth == BleuSmooth::add_k ? 1.0 : 0.0;
  BleuScore s;
  s.sys_len = stats.sys_len, s.ref_len = stats.ref_len;
  s.counts.assign(stats.correct.begin(), stats.correct.end());
  s.totals.assign(stats.total.begin(), stats.total.end());
  s.precisions.assign(size_t(N), 0.0);
  s.bp = 1.0;
  if (s.sys_len < s.ref_len) s.bp = s.sys_len > 0 ? std::exp(1.0 - double(s.ref_len) / double(s.sys_len)) : 0.0;
  if (std::all_of(s.counts.begin(), s.counts.end(), [](double c) { return c == 0; })) return s;  // score 0
  double mteval = 1.0;
  int order = N;
  for (int n = 1; n <= N; ++n) {
    double& c = s.counts[size_t(n - 1)];
    double& t = s.totals[size_t(n - 1)];
    if (o.smooth == BleuSmooth::add_k && n > 1) c += value, t += value;
    if (t == 0) break;
    if (o.effective_order) order = n;
    double& p = s.precisions[size_t(n - 1)];
    if (c == 0) {
      if (o.smooth == BleuSmooth::exp) {
        mteval *= 2;
        p = 100.0 / (mteval * t);
      } else if (o.smooth == BleuSmooth::floor) {
        p = 100.0 * value / t;
      }
    } else {
      p = 100.0 * c / t;
    }
  }
  double logs = 0;
  for (int n = 0; n < order; ++n) logs += s.precisions[size_t(n)] == 0 ? -9999999999.0 : std::log(s.precisions[size_t(n)]);
  s.score = s.bp * std::exp(logs / order);
  return s;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs,
                      const BleuOptions& o) {
  check(o);
  for (size_t k = 0; k < refs.size(); ++k)
    if (refs[k].size() != hyps.size())
      fail_input("BLEU references", "stream ", k + 1, " holds ", refs[k].size(), " segments, the hypotheses ",
                 hyps.size());
  BleuStats sum;
  sum.correct.assign(size_t(o.max_order), 0);
  sum.total.assign(size_t(o.max_order), 0);
  std::vector<std::string> seg_refs(refs.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    for (size_t k = 0; k < refs.size(); ++k) seg_refs[k] = preprocess(refs[k][i], o);
    const BleuStats st = bleu_segment_stats(preprocess(hyps[i], o), seg_refs, o.max_order);
    sum.sys_len += st.sys_len, sum.ref_len += st.ref_len;
    for (int n = 0; n < o.max_order; ++n) sum.correct[size_t(n)] += st.correct[size_t(n)], sum.total[size_t(n)] += st.total[size_t(n)];
  }
  return bleu_from_stats(sum, o);
}

BleuScore sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs, BleuOptions o) {
  o.effective_order = true;
  std::vector<std::vector<std::string>> streams;
  for (const std::string& r : refs) streams.push_back({r});
  return corpus_bleu({hyp}, streams, o);
}

std::string BleuScore::describe() const {
  char buf[256];
  std::string prec;
  for (double p : precisions) {
    std::snprintf(buf, sizeof(buf), "%s%.1f", prec.empty() ? "" : "/", p);
    prec += buf;
  }
  std::snprintf(buf, sizeof(buf), "BLEU = %.2f %s (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score,
                prec.c_str(), bp, ref_len ? double(sys_len) / double(ref_len) : 0.0, sys_len, ref_len);
  return buf;
}

}  // namespace gpt2
