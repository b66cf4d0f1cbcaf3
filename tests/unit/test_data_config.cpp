// Token shards, the loader's batch semantics and data-parallel partitions, and input decks.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "../common/tiny_data.hpp"
#include "core/error.hpp"
#include "data/loader.hpp"
#include "formats/checkpoint.hpp"
#include "train/run_config.hpp"

using namespace gpt2;

namespace {
std::string dir() {
  static const std::string d = test::temp_dir("data");
  return d;
}
std::vector<uint16_t> iota_tokens(size_t n, int vocab) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(i % vocab);
  return t;
}
}  // namespace

TEST(Shard, WriteReadRoundTripAndValidation) {
  const auto t = test::pseudo_text(1000, 50, 1);
  write_shard(dir() + "/a.bin", t);
  Shard s(dir() + "/a.bin", 50);
  ASSERT_EQ(s.size(), t.size());
  EXPECT_TRUE(std::equal(t.begin(), t.end(), s.tokens()));
  EXPECT_THROW(Shard(dir() + "/a.bin", 10), InputError);  // tokens beyond a smaller vocabulary
  EXPECT_THROW(Shard(dir() + "/missing.bin"), InputError);
  { std::ofstream(dir() + "/trunc.bin", std::ios::binary) << std::string(1024 + 10, '\0'); }
  EXPECT_THROW(Shard(dir() + "/trunc.bin"), InputError);  // zero magic
}

TEST(Loader, SequentialBatchesWrapAtTheEpoch) {
  const int T = 4, B = 3;
  write_shard(dir() + "/seq_000.bin", iota_tokens(4 * 10 + 1, 1000));  // 10 sequences
  write_shard(dir() + "/seq_001.bin", iota_tokens(4 * 5 + 3, 1000));    // 5 more (tail unused)
  TokenDataset data(dir() + "/seq_*.bin", "data.train", T, 1000);
  ASSERT_EQ(data.num_sequences(), 15u);
  DataLoader loader(data, B, false, 0, "data.train");
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  std::vector<int> in(B * T), tg(B * T);
  loader.load(1, 0, B, in.data(), tg.data());  // batch 1 = sequences 3, 4, 5
  for (int r = 0; r < B; ++r)
    for (int j = 0; j < T; ++j) {
      EXPECT_EQ(in[r * T + j], (3 + r) * T + j);
      EXPECT_EQ(tg[r * T + j], (3 + r) * T + j + 1);  // targets: the next token
    }
  loader.load(3, 1, 1, in.data(), tg.data());  // batch 3, row 1 = sequence 10 = shard 1's first
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(tg[T - 1], T);
  EXPECT_EQ(loader.sequence_of(5, 0), 0u);  // batch 5 is epoch 1's first
}

// data.document_mask in plain text: a document ends at the end-of-text token (the token after it
// starts the next); without marking, a sequence is one document.
TEST(Loader, DocumentsEndAtTheEndOfTextToken) {
  const int T = 8, eot = 9;
  write_shard(dir() + "/doc_000.bin", {1, 2, eot, 3, 4, 5, eot, eot, 6, 7});
  TokenDataset data(dir() + "/doc_*.bin", "data.train", T, 16);
  std::vector<int> in(T), tg(T), starts(T, -1);
  data.sequence(0, in.data(), tg.data(), starts.data());
  EXPECT_EQ(starts, std::vector<int>(T, 0));
  data.mark_documents(eot);
  DataLoader loader(data, 1, false, 0, "data.train");
  loader.load(0, 0, 1, in.data(), tg.data(), starts.data());
  EXPECT_EQ(starts, (std::vector<int>{0, 0, 0, 3, 3, 3, 3, 7}));
  EXPECT_FALSE(has_loss_masks(dir() + "/doc_*.bin"));
  EXPECT_FALSE(has_loss_masks(dir() + "/nothing_*.bin"));
}

TEST(Loader, ShuffledEpochsAreSeededPermutations) {
  write_shard(dir() + "/shuf.bin", iota_tokens(8 * 64 + 1, 1000));
  TokenDataset data(dir() + "/shuf.bin", "data.train", 8, 1000);
  DataLoader a(data, 8, true, 42, "data.train"), b(data, 8, true, 42, "data.train"),
      c(data, 8, true, 43, "data.train");
  std::vector<size_t> e0, e1, other;
  for (int64_t k = 0; k < 16; ++k)
    for (int r = 0; r < 8; ++r) {
      (k < 8 ? e0 : e1).push_back(a.sequence_of(k, r));
      EXPECT_EQ(a.sequence_of(k, r), b.sequence_of(k, r));
      if (k < 8) other.push_back(c.sequence_of(k, r));
    }
  EXPECT_EQ(std::set<size_t>(e0.begin(), e0.end()).size(), 64u);  // a permutation of the epoch
  EXPECT_NE(e0, e1);                                             // a new one each epoch
  EXPECT_NE(e0, other);                                          // and per seed
}

TEST(Loader, DataParallelPartitionsAreDisjointAndCoverTheData) {
  write_shard(dir() + "/part.bin", iota_tokens(16 * 96 + 1, 1000));  // 96 sequences
  TokenDataset data(dir() + "/part.bin", "data.train", 16, 1000);
  for (bool shuffle : {false, true})
    for (int dp : {1, 2, 4}) {
      const int B = 8, per_rank = B / dp;
      DataLoader loader(data, B, shuffle, 7, "data.train");
      std::vector<std::set<size_t>> part(dp);
      for (int64_t k = 0; k < loader.batches_per_epoch(); ++k)
        for (int r = 0; r < dp; ++r)
          for (int row = r * per_rank; row < (r + 1) * per_rank; ++row) part[r].insert(loader.sequence_of(k, row));
      std::set<size_t> all;
      size_t total = 0;
      for (const auto& p : part) {
        EXPECT_EQ(p.size(), size_t(96 / dp));  // equal sizes
        total += p.size();
        all.insert(p.begin(), p.end());
      }
      EXPECT_EQ(total, all.size()) << "partitions overlap (dp " << dp << ")";
      EXPECT_EQ(all.size(), 96u) << "partitions do not cover the epoch (dp " << dp << ")";
    }
}

TEST(InputDeck, BindsKeysAndRejectsTyposAndWrongTypes) {
  const std::string path = dir() + "/deck.toml";
  std::ofstream(path) << "[model]\nn_layer = 3\n[train]\nlr = 1e-3\nbatch_size = 16\n[data]\ntrain = \"x.bin\"\n";
  RunConfig c = RunConfig::load(path, {"train.steps=7", "data.shuffle=true", "data.val=v_*.bin"});
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.val, "v_*.bin");
  auto message = [&](std::vector<std::string> sets) {
    try {
      RunConfig::load(path, sets);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({"model.n_layers=2"}),
            "model.n_layers: unknown configuration key (did you mean model.n_layer?)");
  EXPECT_EQ(message({"train.steps=1.5"}), "train.steps: expected an integer, got a number");
  EXPECT_EQ(message({"data.shuffle=1"}), "data.shuffle: expected true or false, got an integer");
  EXPECT_EQ(message({"nosection=1"}), "--set nosection=1: expected section.key=value, e.g. train.lr=3e-4");
  // A deck built on another one overrides only what it names.
  std::ofstream(dir() + "/derived.toml") << "base = \"deck.toml\"\n[train]\nlr = 5e-4\n";
  RunConfig d = RunConfig::load(dir() + "/derived.toml");
  EXPECT_EQ(d.model.n_layer, 3);
  EXPECT_EQ(d.train.batch_size, 16);
  EXPECT_DOUBLE_EQ(d.train.lr, 5e-4);
  std::ofstream(dir() + "/cycle.toml") << "base = \"cycle.toml\"\n";
  EXPECT_THROW(RunConfig::load(dir() + "/cycle.toml"), InputError);
  // The effective configuration reads back to itself.
  const std::string text = c.toml();
  std::ofstream(dir() + "/again.toml") << text;
  EXPECT_EQ(RunConfig::load(dir() + "/again.toml").toml(), text);
}

TEST(Checkpoint, ChecksumDoesNotDependOnHowTheDataIsSplit) {
  std::vector<unsigned char> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  const uint64_t whole = checksum(bytes.data(), bytes.size());
  for (size_t piece : {1, 3, 7, 8, 13, 999}) {
    // The writer feeds sections in pieces of any size; the digest must not change.
    gpt2::ChecksumStream h;
    for (size_t i = 0; i < bytes.size(); i += piece) h.update(bytes.data() + i, std::min(piece, bytes.size() - i));
    EXPECT_EQ(h.digest(), whole) << "pieces of " << piece;
  }
  bytes[500] ^= 1;
  EXPECT_NE(checksum(bytes.data(), bytes.size()), whole);
}

// A deck key of a few words is read once into its enum: the word is checked as the deck is read (the
// message lists the words), a TOML boolean is the word "true" or "false" where the list has them,
// and the effective configuration writes the word back.
TEST(InputDeck, ChoicesAreReadIntoTheirEnumsOnce) {
  struct Deck {
    Choice<Precision> precision = Precision::fp32;
    Choice<Toggle> resume = Toggle::off;
  } d;
  const std::vector<DeckField> fields = {{"train.precision", &d.precision, ""}, {"checkpoint.resume", &d.resume, ""}};
  auto bind = [&](const std::string& text) {
    try {
      InputDeck::from_string(text, "deck").bind(fields);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(bind("[train]\nprecision = \"bf16\"\n[checkpoint]\nresume = true\n"), "");
  EXPECT_EQ(d.precision, Precision::bf16);
  EXPECT_EQ(d.resume, Toggle::on);
  EXPECT_EQ(InputDeck::to_toml(fields), "[train]\nprecision = \"bf16\"\n\n[checkpoint]\nresume = true\n");
  EXPECT_EQ(bind("[checkpoint]\nresume = \"auto\"\n"), "");
  EXPECT_EQ(d.resume, Toggle::automatic);
  EXPECT_EQ(InputDeck::to_toml({fields[1]}), "[checkpoint]\nresume = \"auto\"\n");
  EXPECT_EQ(bind("[train]\nprecision = \"fp8\"\n"), "train.precision: expected fp32, bf16 or fp16, got \"fp8\"");
  EXPECT_EQ(d.precision, Precision::bf16) << "a refused word leaves the value";
  EXPECT_EQ(bind("[train]\nprecision = 16\n"), "train.precision: expected fp32, bf16 or fp16, got an integer");
  EXPECT_EQ(bind("[train]\nprecision = true\n"), "train.precision: expected fp32, bf16 or fp16, got a boolean");
  EXPECT_EQ(bind("[checkpoint]\nresume = \"later\"\n"), "checkpoint.resume: expected true, false or \"auto\", got \"later\"");
  EXPECT_EQ(bind("[checkpoint]\nresume = \"True\"\n"), "checkpoint.resume: expected true, false or \"auto\", got \"True\"");
  // The enum's words in its own order; parse_word for words that come from elsewhere (a command line).
  EXPECT_STREQ(word(Recompute::selective), "selective");
  EXPECT_STREQ(word(d.precision), "bf16");
  Recompute r = Recompute::none;
  EXPECT_TRUE(parse_word("full", r));
  EXPECT_EQ(r, Recompute::full);
  EXPECT_FALSE(parse_word("most", r));
  EXPECT_EQ(r, Recompute::full);
}
