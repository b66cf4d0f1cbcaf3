// Translation pairs: reading pairs files, examples and their loss masks in shard side files, and the
// loader packing whole examples into sequences (masked targets, counted tokens).
#include <gtest/gtest.h>

#include <fstream>

#include "../common/tiny_data.hpp"
#include "core/error.hpp"
#include "data/loader.hpp"
#include "test_util.hpp"
#include "train/translation.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
std::string dir() {
  static const std::string d = test::temp_dir("pairs");
  return d;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// What `gpt2 prepare --pairs` writes for these pairs: one shard and its mask.
void write_pairs_shard(const std::string& path, const std::vector<Pair>& pairs, const std::string& source) {
  auto tok = make_tokenizer("byte");
  const PairTokens pt = pair_tokens(*tok);
  std::vector<uint16_t> tokens;
  ShardMask m;
  m.source = source;
  std::vector<uint8_t> mask;
  for (const Pair& p : pairs) {
    for (int id : encode_example(*tok, pt, p, &mask)) tokens.push_back(uint16_t(id));
    m.mask.insert(m.mask.end(), mask.begin(), mask.end());
    m.lines.push_back(p.line);
  }
  write_shard(path, tokens);
  write_mask(mask_path(path), m);
}
}  // namespace

TEST(Pairs, ReadTsvAndAlignedFiles) {
  write_text(dir() + "/p.tsv", "12\ttwelve\r\n\n7\tseven\n\tnothing\n3\t\n40\tforty");
  const PairsRead r = read_pairs(dir() + "/p.tsv");
  ASSERT_EQ(r.pairs.size(), 3u);
  EXPECT_EQ(r.pairs[0].source, "12");
  EXPECT_EQ(r.pairs[0].target, "twelve");  // "\r\n" ends a line
  EXPECT_EQ(r.pairs[1].line, 3);           // the blank line counts as a line
  EXPECT_EQ(r.pairs[2].target, "forty");   // a last line without its newline
  EXPECT_EQ(r.skipped, 2);                 // "\tnothing" and "3\t": an empty side
  write_text(dir() + "/bad.tsv", "1\tone\ntwo\n");
  try {
    read_pairs(dir() + "/bad.tsv");
    FAIL() << "a line without a tab was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 has no tab"), std::string::npos) << e.what();
  }
  write_text(dir() + "/src.txt", "a\nb\n");
  write_text(dir() + "/tgt.txt", "A\nB\n");
  const PairsRead two = read_pairs(dir() + "/src.txt", dir() + "/tgt.txt");
  ASSERT_EQ(two.pairs.size(), 2u);
  EXPECT_EQ(two.pairs[1].source + two.pairs[1].target, "bB");
  write_text(dir() + "/tgt1.txt", "A\n");
  EXPECT_THROW(read_pairs(dir() + "/src.txt", dir() + "/tgt1.txt"), InputError);
}

TEST(Pairs, AnExampleIsSourceSeparatorTargetEndWithTheTargetMasked) {
  auto tok = make_tokenizer("byte");
  const PairTokens pt = pair_tokens(*tok);
  EXPECT_EQ(pt.separator, '\t');
  EXPECT_EQ(pt.end, '\n');
  std::vector<uint8_t> mask;
  const std::vector<int> ids = encode_example(*tok, pt, {"12", "ab", 1}, &mask);
  EXPECT_EQ(ids, (std::vector<int>{'1', '2', '\t', 'a', 'b', '\n'}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(encode_prompt(*tok, pt, "12"), (std::vector<int>{'1', '2', '\t'}));
}

// Examples are packed whole, in order, as many as fit in T positions (an example of n tokens takes
// n - 1); the rest is padding. Targets outside the mask are kMaskedTarget; counted() is the number
// of targets the loss counts.
TEST(Pairs, LoaderPacksWholeExamplesAndMasksTheRest) {
  const int T = 12;
  // Examples of 6, 8, 4 and 11 tokens (source, separator, target, end): 5, 7, 3 and 10 positions.
  const std::vector<Pair> pairs = {{"1", "abc", 3}, {"12", "abcd", 4}, {"7", "x", 6}, {"123", "abcdef", 9}};
  write_pairs_shard(dir() + "/pk_000.bin", pairs, "pk.tsv");
  TokenDataset data(dir() + "/pk_*.bin", "data.train", T, 256);
  ASSERT_TRUE(data.masked());
  // positions: 5 + 7 = 12 (row 0), 3 + 10 > 12 -> row 1 holds example 3 (3), row 2 example 4 (10)
  ASSERT_EQ(data.num_sequences(), 3u);
  std::vector<int> in(T), tg(T);
  data.sequence(0, in.data(), tg.data());
  const std::vector<int> in0 = {'1', '\t', 'a', 'b', 'c', '1', '2', '\t', 'a', 'b', 'c', 'd'};
  const int M = kMaskedTarget;
  EXPECT_EQ(in, in0);
  // the source's next tokens ('\t' after '1', '2' after '1') are not counted: M
  EXPECT_EQ(tg, (std::vector<int>{M, 'a', 'b', 'c', '\n', M, M, 'a', 'b', 'c', 'd', '\n'}));
  EXPECT_EQ(data.counted(0), 4 + 5);
  data.sequence(1, in.data(), tg.data());
  EXPECT_EQ(std::vector<int>(in.begin(), in.begin() + 3), (std::vector<int>{'7', '\t', 'x'}));
  EXPECT_EQ(std::vector<int>(tg.begin(), tg.begin() + 3), (std::vector<int>{M, 'x', '\n'}));
  for (int j = 3; j < T; ++j) EXPECT_EQ(tg[j], M) << "padding at " << j;
  EXPECT_EQ(data.counted(1), 2);
  EXPECT_EQ(data.counted(2), 7);
  // Documents: each example one (starting where it starts), the padding another.
  std::vector<int> starts(T);
  data.sequence(0, in.data(), tg.data(), starts.data());
  EXPECT_EQ(starts, (std::vector<int>{0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5}));
  data.sequence(1, in.data(), tg.data(), starts.data());
  EXPECT_EQ(starts, (std::vector<int>{0, 0, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3}));
  EXPECT_TRUE(has_loss_masks(dir() + "/pk_*.bin"));
  DataLoader loader(data, 3, false, 0, "data.train");
  EXPECT_EQ(loader.counted_tokens(0), 9 + 2 + 7);
  // Shuffled: the same rows in another order, the same count.
  DataLoader shuffled(data, 3, true, 5, "data.train");
  EXPECT_EQ(shuffled.counted_tokens(0), 18);
}

TEST(Pairs, AnExampleLongerThanTheSequenceNamesItsLine) {
  write_pairs_shard(dir() + "/long_000.bin", {{"1", "ab", 2}, {"123456", "abcdefgh", 17}}, "corpus.tsv");
  try {
    TokenDataset data(dir() + "/long_*.bin", "data.train", 10, 256);
    FAIL() << "a 16-token example was packed into 10 positions";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("corpus.tsv line 17"), std::string::npos) << w;
    EXPECT_NE(w.find("data.seq_len"), std::string::npos) << w;
  }
  TokenDataset fits(dir() + "/long_*.bin", "data.train", 15, 256);  // 16 tokens take 15 positions
  EXPECT_EQ(fits.num_sequences(), 2u);
}

TEST(Pairs, MaskFilesAreValidatedAndPlainShardsCountEveryToken) {
  write_pairs_shard(dir() + "/mv_000.bin", {{"1", "ab", 1}}, "x.tsv");
  EXPECT_THROW(read_mask(dir() + "/mv_000.mask", 99), InputError);  // another shard's token count
  const ShardMask m = read_mask(dir() + "/mv_000.mask", 5);
  EXPECT_EQ(m.source, "x.tsv");
  EXPECT_EQ(m.lines, std::vector<int32_t>{1});
  ShardMask bad = m;
  bad.mask[0] = 1;  // a shard must start with a source
  write_mask(dir() + "/mv_bad.mask", bad);
  EXPECT_THROW(read_mask(dir() + "/mv_bad.mask", 5), InputError);
  { std::ofstream(dir() + "/mv_trunc.mask", std::ios::binary) << std::string(100, '\0'); }
  EXPECT_THROW(read_mask(dir() + "/mv_trunc.mask", 5), InputError);
  // llm.c's plain shards load as before: every target counts.
  write_shard(dir() + "/plain_000.bin", test::pseudo_text(200, 50, 1));
  TokenDataset plain(dir() + "/plain_*.bin", "data.train", 16, 50);
  EXPECT_FALSE(plain.masked());
  EXPECT_EQ(plain.counted(3), 16);
  DataLoader loader(plain, 4, false, 0, "data.train");
  EXPECT_EQ(loader.counted_tokens(1), 64);
}
