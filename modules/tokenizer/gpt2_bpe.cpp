#include "modules/tokenizer/gpt2_bpe.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "core/error.hpp"
#include "modules/tokenizer/gpt2_bpe_files.hpp"
#include "modules/tokenizer/gpt2_text.hpp"

namespace gpt2 {

namespace {
// ---------------------------------------------------------------------------------------------
// Merge table: (left id, right id) -> (rank, merged id). Open addressing, power-of-two size.
class PairTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1) --shift_;
  }
  // Later inserts of the same pair overwrite (as dict(zip(merges, ranks)) does).
  void insert(int a, int b, int rank, int merged) {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == k) {
        slots_[i] = Entry{k, rank, merged};
        return;
      }
    }
  }
  const Entry* find(int a, int b) const {
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == k) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t key(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 60;
};

// ---------------------------------------------------------------------------------------------
// Cache: piece bytes -> token ids. Keys and values live in two arenas; bounded (cleared when full).
class WordCache {
 public:
  static constexpr size_t kMaxEntries = size_t{1} << 19;
  static constexpr size_t kMaxKeyLen = 64;

  bool find(std::string_view key, size_t h, std::vector<int>& out) const {
    if (slots_.empty()) return false;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.val_len == 0) return false;
      if (s.hash == h && s.key_len == key.size() &&
          std::char_traits<char>::compare(keys_.data() + s.key_off, key.data(), key.size()) == 0) {
        out.insert(out.end(), vals_.begin() + s.val_off, vals_.begin() + s.val_off + s.val_len);
        return true;
      }
    }
  }
  void insert(std::string_view key, size_t h, const int* ids, size_t n) {
    if (count_ >= kMaxEntries) clear();
    if (2 * (count_ + 1) > slots_.size()) grow();
    Slot s{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()),
           static_cast<uint32_t>(vals_.size()), static_cast<uint32_t>(n)};
    keys_.append(key.data(), key.size());
    vals_.insert(vals_.end(), ids, ids + n);
    place(s);
    ++count_;
  }
  void clear() {
    slots_.assign(slots_.size(), Slot{});
    keys_.clear();
    vals_.clear();
    count_ = 0;
  }

 private:
  struct Slot {
    size_t hash = 0;
    uint32_t key_off = 0, key_len = 0, val_off = 0, val_len = 0;  // val_len == 0: empty slot
  };
  void place(const Slot& s) {
    size_t i = s.hash & mask_;
    while (slots_[i].val_len != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old)
      if (s.val_len != 0) place(s);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
  std::string keys_;
  std::vector<int> vals_;
};

struct HeapItem {
  int32_t rank;
  int32_t pos;
  int32_t left, right;
  bool operator>(const HeapItem& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Scratch space of one encode call (the shared one is reused across calls).
struct Workspace {
  WordCache cache;
  std::vector<int> sym, ranks, prev, next;
  std::vector<HeapItem> heap;
};

}  // namespace

// =============================================================================================
struct Gpt2Bpe::Impl {
  std::vector<std::string> id_bytes;  // id -> raw bytes
  std::array<int, 256> byte_id{};     // byte -> id of its single-byte token
  PairTable pairs;
  bool heap_ok = false;  // merges are ordered so that the heap algorithm equals the reference
  int eot = -1;
  bpe_text::Pretokenizer split;

  mutable std::mutex mu;  // guards `shared` (a caller that finds it busy uses its own workspace)
  mutable Workspace shared;

  static constexpr size_t kHeapMin = 64;  // pieces this long or longer use the heap algorithm

  // Short pieces: the reference algorithm (lowest-rank pair, all occurrences left to right).
  void bpe_naive(std::string_view piece, Workspace& ws) const {
    auto& sym = ws.sym;
    auto& rk = ws.ranks;
    size_t n = piece.size();
    sym.resize(n);
    rk.resize(n);
    for (size_t i = 0; i < n; ++i) sym[i] = byte_id[static_cast<unsigned char>(piece[i])];
    auto rank_of = [&](size_t i) {
      const auto* e = pairs.find(sym[i], sym[i + 1]);
      return e ? e->rank : INT_MAX;
    };
    for (size_t i = 0; i + 1 < n; ++i) rk[i] = rank_of(i);
    while (n > 1) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i)
        if (rk[i] < rk[best]) best = i;
      if (rk[best] == INT_MAX) break;
      const int a = sym[best], b = sym[best + 1];
      const int m = pairs.find(a, b)->merged;
      size_t w = best, r = best;
      while (r < n) {
        if (r + 1 < n && sym[r] == a && sym[r + 1] == b) {
          sym[w++] = m;
          r += 2;
        } else {
          sym[w++] = sym[r++];
        }
      }
      n = w;
      for (size_t i = best == 0 ? 0 : best - 1; i + 1 < n; ++i) rk[i] = rank_of(i);
    }
    sym.resize(n);
  }

  // Long pieces: the same merges in O(n log n) with a linked list and a min-heap of
  // (rank, position). Equal to bpe_naive when heap_ok (see parse()).
  void bpe_heap(std::string_view piece, Workspace& ws) const {
    const int n = static_cast<int>(piece.size());
    auto& sym = ws.sym;
    auto& prev = ws.prev;
    auto& next = ws.next;
    auto& heap = ws.heap;
    sym.resize(n);
    prev.resize(n);
    next.resize(n);
    heap.clear();
    for (int i = 0; i < n; ++i) {
      sym[i] = byte_id[static_cast<unsigned char>(piece[i])];
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const auto cmp = std::greater<HeapItem>();
    auto push = [&](int pos) {
      const int q = next[pos];
      if (q < 0) return;
      if (const auto* e = pairs.find(sym[pos], sym[q])) {
        heap.push_back(HeapItem{e->rank, pos, sym[pos], sym[q]});
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      const HeapItem it = heap.back();
      heap.pop_back();
      const int p = it.pos;
      if (sym[p] < 0 || sym[p] != it.left) continue;  // gone or changed
      const int q = next[p];
      if (q < 0 || sym[q] != it.right) continue;
      sym[p] = pairs.find(it.left, it.right)->merged;
      sym[q] = -1;
      next[p] = next[q];
      if (next[q] >= 0) prev[next[q]] = p;
      if (prev[p] >= 0) push(prev[p]);
      push(p);
    }
    int w = 0;
    for (int i = 0; i >= 0; i = next[i]) sym[w++] = sym[i];
    sym.resize(w);
  }

  void bpe(std::string_view piece, Workspace& ws, bool use_heap) const {
    if (use_heap)
      bpe_heap(piece, ws);
    else
      bpe_naive(piece, ws);
  }

  void encode_piece(std::string_view piece, Workspace& ws, std::vector<int>& out) const {
    if (piece.size() == 1) {
      out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
      return;
    }
    const bool cacheable = piece.size() <= WordCache::kMaxKeyLen;
    size_t h = 0;
    if (cacheable) {
      h = std::hash<std::string_view>{}(piece);
      if (ws.cache.find(piece, h, out)) return;
    }
    bpe(piece, ws, heap_ok && piece.size() >= kHeapMin);
    if (cacheable) ws.cache.insert(piece, h, ws.sym.data(), ws.sym.size());
    out.insert(out.end(), ws.sym.begin(), ws.sym.end());
  }

  void encode(std::string_view text, std::vector<int>& out, const std::string& source, Workspace& ws) const {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n;) {
      const size_t j = split.next_piece(s, n, i, source);
      encode_piece(text.substr(i, j - i), ws, out);
      i = j;
    }
  }
};

// =============================================================================================
Gpt2Bpe::Gpt2Bpe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2Bpe::~Gpt2Bpe() = default;

std::unique_ptr<Gpt2Bpe> Gpt2Bpe::load(const std::string& vocab_path, const std::string& merges_path) {
  const std::string vocab = bpe_files::read_file(vocab_path, "vocabulary (encoder.json)");
  const std::string merges = bpe_files::read_file(merges_path, "merges (vocab.bpe)");
  return parse(vocab, merges, vocab_path, merges_path);
}

namespace {
using bpe_files::Merges;

// The heap algorithm merges the leftmost lowest-rank pair one at a time; it equals the reference
// (all occurrences of the lowest-rank pair per pass) when every merge that uses a token ranks
// after every merge that makes it (true for GPT-2: BPE training appends merges in order).
bool heap_equals_reference(const PairTable& pairs, const Merges& m, int vocab_size) {
  std::vector<int> made(vocab_size, -1);
  for (size_t r = 0; r < m.a.size(); ++r) {
    const auto* e = pairs.find(m.a[r], m.b[r]);
    if (e->rank == static_cast<int>(r)) made[m.merged[r]] = std::max(made[m.merged[r]], e->rank);
  }
  bool ok = true;
  for (size_t r = 0; r < m.a.size(); ++r) {
    const auto* e = pairs.find(m.a[r], m.b[r]);
    if (e->rank != static_cast<int>(r)) continue;  // overridden duplicate
    if (made[m.a[r]] >= e->rank || made[m.b[r]] >= e->rank) ok = false;
  }
  return ok;
}
}  // namespace

std::unique_ptr<Gpt2Bpe> Gpt2Bpe::parse(std::string_view vocab_json, std::string_view merges_text,
                                        const std::string& vocab_name, const std::string& merges_name) {
  auto impl = std::make_unique<Impl>();
  bpe_files::Vocabulary v = bpe_files::read_vocabulary(vocab_json, vocab_name);
  const Merges m = bpe_files::read_merges(merges_text, v.ids, merges_name, vocab_name);
  impl->id_bytes = std::move(v.id_bytes), impl->byte_id = v.byte_id, impl->eot = v.eot;
  impl->pairs.reserve(m.a.size());
  for (size_t r = 0; r < m.a.size(); ++r) impl->pairs.insert(m.a[r], m.b[r], static_cast<int>(r), m.merged[r]);
  impl->heap_ok = heap_equals_reference(impl->pairs, m, static_cast<int>(impl->id_bytes.size()));
  return std::unique_ptr<Gpt2Bpe>(new Gpt2Bpe(std::move(impl)));
}

int Gpt2Bpe::vocab_size() const { return static_cast<int>(impl_->id_bytes.size()); }
int Gpt2Bpe::eot() const { return impl_->eot; }

void Gpt2Bpe::encode_append(std::string_view text, std::vector<int>& out, const std::string& source) const {
  std::unique_lock<std::mutex> lock(impl_->mu, std::try_to_lock);
  if (lock.owns_lock()) {
    impl_->encode(text, out, source, impl_->shared);
  } else {
    Workspace local;  // another thread holds the shared cache: work with a private one
    impl_->encode(text, out, source, local);
  }
}

std::vector<int> Gpt2Bpe::encode(std::string_view text, const std::string& source) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 16);
  encode_append(text, out, source);
  return out;
}

std::string Gpt2Bpe::decode(const std::vector<int>& ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  const int nv = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= nv)
      fail_input("tokens", "GPT-2 token id ", ids[i], " at position ", i, " is outside 0..", nv - 1);
    out += impl_->id_bytes[ids[i]];
  }
  return out;
}

std::vector<std::string_view> Gpt2Bpe::pretokenize(std::string_view text, const std::string& source) const {
  std::vector<std::string_view> pieces;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t j = impl_->split.next_piece(s, text.size(), i, source);
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}

std::vector<int> Gpt2Bpe::bpe_piece(std::string_view bytes, bool use_heap) const {
  if (bytes.empty()) return {};
  Workspace ws;
  impl_->bpe(bytes, ws, use_heap);
  return ws.sym;
}

}  // namespace gpt2
