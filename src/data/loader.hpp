#pragma once
// Batches from token shards. A sequence is T+1 consecutive tokens starting at a multiple of T
// within one shard (inputs = first T, targets = last T); sequences are numbered shard by shard.
// Global batch k (epoch e = k / batches_per_epoch, j = k % batches_per_epoch) holds sequences
// order_e[j*B, (j+1)*B), where order_e is the identity (shuffle off) or a permutation seeded by
// (seed, e) (shuffle on). A data-parallel rank takes a contiguous slice of rows of each global batch,
// so any dp/pp layout sees exactly the data of the one-rank run, and the ranks' slices of an epoch
// are disjoint partitions of it. The data position is just the step number: nothing else to save.
//
// A shard with a loss mask beside it (token_shard.hpp: translation pairs) is read as whole examples
// instead: packed in order into sequences (as many whole examples as fit, never one split across
// two, the rest padding), an example of n tokens taking n - 1 positions (its last token is a target
// only). Targets outside the mask (source, separator, padding) are written as kMaskedTarget, which
// the loss skips; counted(i) says how many of a sequence's targets the loss counts (T for plain
// text), and a batch's loss is the mean over its counted targets.
//
// Documents (data.document_mask): each position's document start, for attention that stays inside
// a document and positions that restart at each one. A packed example is a document (its padding
// another); in plain text a document ends at the end-of-text token (mark_documents): the token
// after one starts the next.
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_shard.hpp"

namespace gpt2 {

constexpr int kMaskedTarget = -1;  // a target the loss does not count (the loss skips negative targets)

class TokenDataset {
 public:
  // pattern: a path or glob; key names the config entry in errors ("data.train").
  TokenDataset(const std::string& pattern, const std::string& key, int seq_len, int vocab_size);
  size_t num_sequences() const { return total_; }
  int seq_len() const { return T_; }
  size_t num_tokens() const;
  const std::vector<Shard>& shards() const { return shards_; }
  // Plain shards' documents end at `end_token` (-1: a sequence is one document).
  void mark_documents(int end_token) { doc_end_ = end_token; }
  // Writes the T inputs and T targets of sequence i and, where starts is given, each position's
  // document start (a position in [0, T)).
  void sequence(size_t i, int* inputs, int* targets, int* starts = nullptr) const;
  // Targets of sequence i the loss counts (T for a plain shard's).
  int counted(size_t i) const;
  bool masked() const { return !packed_.empty(); }  // some shard has a loss mask

 private:
  struct Example {
    size_t begin, end;  // tokens [begin, end) of its shard
  };
  struct PackedRow {  // a sequence of whole examples
    size_t first, count;  // examples [first, first + count) of the shard's
    int counted;
  };
  struct ShardRows {  // a masked shard: its examples and the sequences packed from them
    std::vector<Example> examples;
    std::vector<PackedRow> rows;
    std::vector<uint8_t> mask;
  };
  void pack(size_t shard, const ShardMask& m, const std::string& key);
  size_t shard_of(size_t i) const;

  std::vector<Shard> shards_;
  std::vector<size_t> first_;  // first sequence id of each shard
  std::vector<int> packed_index_;  // per shard: its index in packed_, or -1 (plain text)
  std::vector<ShardRows> packed_;
  size_t total_ = 0;
  int T_;
  int doc_end_ = -1;
};

class DataLoader {
 public:
  DataLoader(const TokenDataset& data, int64_t global_batch, bool shuffle, uint64_t seed,
             const std::string& key);
  int64_t batches_per_epoch() const { return per_epoch_; }
  // Sequence id of row `row` of global batch k.
  size_t sequence_of(int64_t k, int64_t row);
  // Rows [row_begin, row_begin + rows) of global batch k into host arrays of rows*T ints each
  // (starts, if given: each position's document start in its sequence).
  void load(int64_t k, int64_t row_begin, int64_t rows, int* inputs, int* targets, int* starts = nullptr);
  // The targets global batch k's loss counts (B*T for plain text): the same on every rank.
  int64_t counted_tokens(int64_t k);

 private:
  const TokenDataset& data_;
  int64_t B_, per_epoch_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = -1;            // epoch whose permutation is in order_
  std::vector<uint64_t> order_;
};

}  // namespace gpt2
