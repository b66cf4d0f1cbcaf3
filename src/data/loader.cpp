#include "data/loader.hpp"

#include <algorithm>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace gpt2 {

TokenDataset::TokenDataset(const std::string& pattern, const std::string& key, int seq_len,
                           int vocab_size)
    : T_(seq_len) {
  for (const std::string& path : expand_glob(pattern, key)) {
    shards_.emplace_back(path, vocab_size);
    const size_t n = shards_.back().size();
    first_.push_back(total_);
    total_ += n > size_t(seq_len) ? (n - 1) / seq_len : 0;
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

void TokenDataset::sequence(size_t i, int* inputs, int* targets) const {
  const size_t s = std::upper_bound(first_.begin(), first_.end(), i) - first_.begin() - 1;
  const uint16_t* t = shards_[s].tokens() + (i - first_[s]) * T_;
  for (int j = 0; j < T_; ++j) inputs[j] = t[j], targets[j] = t[j + 1];
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

void DataLoader::load(int64_t k, int64_t row_begin, int64_t rows, int* inputs, int* targets) {
  const int T = data_.seq_len();
  for (int64_t r = 0; r < rows; ++r)
    data_.sequence(sequence_of(k, row_begin + r), inputs + r * T, targets + r * T);
}

}  // namespace gpt2
