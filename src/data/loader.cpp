#include "data/loader.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "core/rng.hpp"

namespace gpt2 {

TokenDataset::TokenDataset(const std::string& pattern, const std::string& key, int seq_len,
                           int vocab_size)
    : T_(seq_len) {
  for (const std::string& path : expand_glob(pattern, key)) {
    shards_.emplace_back(path, vocab_size);
    const size_t n = shards_.back().size();
    first_.push_back(total_);
    const std::string mpath = mask_path(path);
    if (file_exists(mpath)) {
      packed_index_.push_back(int(packed_.size()));
      pack(shards_.size() - 1, read_mask(mpath, n), key);
      total_ += packed_.back().rows.size();
    } else {
      packed_index_.push_back(-1);
      total_ += n > size_t(seq_len) ? (n - 1) / seq_len : 0;
    }
  }
  if (total_ == 0)
    fail_input(key, "\"", pattern, "\" holds no complete sequence of data.seq_len + 1 = ",
               seq_len + 1, " tokens");
}

size_t TokenDataset::num_tokens() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

// Greedy, in order: a sequence takes examples while they fit (an example of n tokens needs n - 1
// positions: inputs ex[0, n-1), targets ex[1, n)).
void TokenDataset::pack(size_t shard, const ShardMask& m, const std::string& key) {
  ShardRows r;
  r.mask = m.mask;
  const auto ranges = m.examples();
  size_t used = 0;
  for (size_t e = 0; e < ranges.size(); ++e) {
    const size_t len = ranges[e].second - ranges[e].first, need = len - 1;
    if (need > size_t(T_))
      fail_input(key, shards_[shard].path(), ": example ", e + 1, " (", m.source.empty() ? "the pairs file" : m.source,
                 " line ", m.lines[e], ") is ", len, " tokens, longer than data.seq_len + 1 = ", T_ + 1,
                 ": raise data.seq_len or shorten (or drop) that pair");
    int counted = 0;
    for (size_t t = ranges[e].first + 1; t < ranges[e].second; ++t) counted += m.mask[t];
    if (r.rows.empty() || used + need > size_t(T_)) {
      r.rows.push_back({e, 0, 0});
      used = 0;
    }
    r.rows.back().count += 1;
    r.rows.back().counted += counted;
    used += need;
    r.examples.push_back({ranges[e].first, ranges[e].second});
  }
  packed_.push_back(std::move(r));
}

size_t TokenDataset::shard_of(size_t i) const {
  return size_t(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin() - 1);
}

void TokenDataset::sequence(size_t i, int* inputs, int* targets, int* starts) const {
  const size_t s = shard_of(i);
  const uint16_t* tokens = shards_[s].tokens();
  if (packed_index_[s] < 0) {
    const uint16_t* t = tokens + (i - first_[s]) * T_;
    for (int j = 0; j < T_; ++j) inputs[j] = t[j], targets[j] = t[j + 1];
    if (starts)
      for (int j = 0; j < T_; ++j) starts[j] = j == 0 ? 0 : inputs[j - 1] == doc_end_ ? j : starts[j - 1];
    return;
  }
  const ShardRows& r = packed_[size_t(packed_index_[s])];
  const PackedRow& row = r.rows[i - first_[s]];
  int j = 0;
  for (size_t e = row.first; e < row.first + row.count; ++e) {
    const int first = j;
    for (size_t t = r.examples[e].begin; t + 1 < r.examples[e].end; ++t, ++j) {
      inputs[j] = tokens[t];
      targets[j] = r.mask[t + 1] ? int(tokens[t + 1]) : kMaskedTarget;
      if (starts) starts[j] = first;
    }
  }
  // Padding: the last example's end token again, counted by nothing (causal attention: the
  // examples before never see it); a document of its own.
  const int pad = tokens[r.examples[row.first + row.count - 1].end - 1], first = j;
  for (; j < T_; ++j) {
    inputs[j] = pad, targets[j] = kMaskedTarget;
    if (starts) starts[j] = first;
  }
}

int TokenDataset::counted(size_t i) const {
  const size_t s = shard_of(i);
  if (packed_index_[s] < 0) return T_;
  return packed_[size_t(packed_index_[s])].rows[i - first_[s]].counted;
}

DataLoader::DataLoader(const TokenDataset& data, int64_t global_batch, bool shuffle, uint64_t seed,
                       const std::string& key)
    : data_(data), B_(global_batch), shuffle_(shuffle), seed_(seed) {
  per_epoch_ = int64_t(data.num_sequences()) / global_batch;
  if (per_epoch_ == 0)
    fail_input(key, "holds ", data.num_sequences(), " sequences of ", data.seq_len() + 1,
               " tokens, fewer than one batch of train.batch_size = ", global_batch);
}

size_t DataLoader::sequence_of(int64_t k, int64_t row) {
  const int64_t epoch = k / per_epoch_, j = k % per_epoch_;
  const size_t pos = size_t(j * B_ + row);
  if (!shuffle_) return pos;
  if (epoch != epoch_) {
    order_.resize(data_.num_sequences());
    std::iota(order_.begin(), order_.end(), 0);
    Rng rng(seed_, 1000003ull + uint64_t(epoch));
    for (size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(i + 1)]);
    epoch_ = epoch;
  }
  return order_[pos];
}

void DataLoader::load(int64_t k, int64_t row_begin, int64_t rows, int* inputs, int* targets, int* starts) {
  const int T = data_.seq_len();
  for (int64_t r = 0; r < rows; ++r)
    data_.sequence(sequence_of(k, row_begin + r), inputs + r * T, targets + r * T, starts ? starts + r * T : nullptr);
}

int64_t DataLoader::counted_tokens(int64_t k) {
  if (!data_.masked()) return B_ * data_.seq_len();
  int64_t n = 0;
  for (int64_t r = 0; r < B_; ++r) n += data_.counted(sequence_of(k, r));
  return n;
}

}  // namespace gpt2
