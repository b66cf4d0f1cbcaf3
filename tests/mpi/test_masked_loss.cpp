// The masked loss of translation pairs (shards with loss masks: whole examples packed into
// sequences, the loss the mean over the target tokens of the global batch) on every layout against
// the one-rank run: losses, gradient norms and validation loss to 1e-5, the parameters after, and
// identical replicas -- dp 2, pp 2 (1F1B), tp 2 (vocabulary-parallel loss), cp 2 (ring attention),
// dp 2 x ZeRO-2, and dp 2 x tp 2 x pp 2 on 8 ranks.
#include "equivalence.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
// Examples as `gpt2 prepare --pairs` writes them, over a 64-token vocabulary: a source of 1-6
// tokens, the separator (0), a target of 1-6 tokens, the end (1); the target and end counted.
std::string pairs_dir() {
  static std::string dir;
  if (dir.empty()) {
    dir = job_dir("masked");
    if (rank_of(MPI_COMM_WORLD) == 0) {
      Rng r(21, 3);
      std::vector<uint16_t> tokens;
      ShardMask m;
      for (int e = 0; e < 500; ++e) {
        const int src = 1 + int(r.below(6)), tgt = 1 + int(r.below(6));
        std::vector<uint16_t> target;
        for (int i = 0; i < src; ++i) tokens.push_back(uint16_t(2 + r.below(62))), m.mask.push_back(0);
        tokens.push_back(0), m.mask.push_back(0);
        for (int i = 0; i < tgt; ++i) tokens.push_back(uint16_t(2 + (tokens[tokens.size() - 1 - size_t(i)] * 7) % 62)), m.mask.push_back(1);
        tokens.push_back(1), m.mask.push_back(1);
        m.lines.push_back(e + 1);
      }
      m.source = "synthetic pairs";
      write_shard(dir + "/pairs_000.bin", tokens);
      write_mask(dir + "/pairs_000.mask", m);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return dir;
}

RunConfig masked_config() {
  RunConfig c = tiny_config(data_dir());
  c.data.train = pairs_dir() + "/pairs_000.bin";
  c.data.val = c.data.train;
  c.model.n_head = 4;
  c.train.steps = 4;
  return c;
}

void expect_layouts_match(const std::vector<std::pair<std::string, RunConfig>>& cases) {
  const RunConfig base = masked_config();
  int ran = 0;
  for (const auto& [what, c] : cases) {
    const int ranks = int(c.grid().world());
    if (ranks > world_size()) continue;
    MPI_Comm g;
    const Result r = train_on_groups(c, ranks, &g);
    expect_matches_reference(r, g, what, &base);
    EXPECT_NEAR(r.eval, reference(-1, &base).eval, 1e-5 * reference(-1, &base).eval) << what << ": validation loss";
    MPI_Comm_free(&g);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "needs more ranks";
}
}  // namespace

// The data really is masked: a one-rank step's loss differs from the same shard read as plain text.
TEST(MaskedLoss, TheMaskChangesTheLoss) {
  const RunConfig c = masked_config();
  const Result& masked = reference(-1, &c);
  RunConfig plain = c;
  const std::string copy = pairs_dir() + "/plain_" + std::to_string(rank_of(MPI_COMM_WORLD)) + ".bin";
  {
    const Shard s(c.data.train);
    write_shard(copy, std::vector<uint16_t>(s.tokens(), s.tokens() + s.size()));  // no mask beside it
  }
  plain.data.train = plain.data.val = copy;
  const Result& all = reference(-1, &plain);
  EXPECT_GT(std::abs(masked.losses[0] - all.losses[0]), 0.05) << masked.losses[0] << " vs " << all.losses[0];
}

TEST(MaskedLoss, EveryLayoutMatchesOneRank) {
  const RunConfig base = masked_config();
  std::vector<std::pair<std::string, RunConfig>> cases;
  auto with = [&](const std::string& what, auto set) {
    RunConfig c = base;
    set(c);
    cases.emplace_back(what, c);
  };
  with("dp 2", [](RunConfig& c) { c.parallel.dp = 2; });
  with("pp 2 1f1b", [](RunConfig& c) { c.parallel.pp = 2, c.parallel.microbatches = 4; });
  with("tp 2", [](RunConfig& c) { c.parallel.tp = 2; });
  with("cp 2", [](RunConfig& c) { c.parallel.cp = 2; });
  with("dp 2 zero 2 x 2 microbatches", [](RunConfig& c) { c.parallel.dp = 2, c.parallel.zero = 2, c.parallel.microbatches = 2; });
  expect_layouts_match(cases);
}

TEST(MaskedLoss, DpTpPpOnEightRanksMatchesOneRank) {
  RunConfig c = masked_config();
  c.parallel.dp = 2, c.parallel.tp = 2, c.parallel.pp = 2, c.parallel.microbatches = 2;
  expect_layouts_match({{"dp 2 x tp 2 x pp 2", c}});
}
