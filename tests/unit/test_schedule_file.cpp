// Hand-written pipeline schedules (parallel.schedule_file): every built-in schedule printed as a file
// and read back runs the same passes with the same simulated bubble; a file's mistakes are caught
// with the line and what was expected; a deck naming a file runs that schedule, checked before any
// work by the simulator.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "pipeline/pass_lists.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/schedule_file.hpp"
#include "pipeline/schedule_lists.hpp"
#include "train/run_config.hpp"

using namespace gpt2;

namespace {
std::vector<Action> compute_only(const std::vector<Action>& list) {
  std::vector<Action> out;
  for (const Action& a : list)
    if (is_compute(a.kind)) out.push_back(a);
  return out;
}

// The InputError message of parsing `text`, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_schedule_file("my.sched", text);
  } catch (const InputError& e) {
    EXPECT_EQ(e.input(), "parallel.schedule_file");
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ScheduleFile, EveryBuiltInScheduleRoundTrips) {
  SimCosts c;
  c.backward = 2;
  int checked = 0;
  for (const std::string& name : ScheduleRegistry::names()) {
    const ScheduleEntry e = ScheduleRegistry::get(name, "parallel.schedule");  // a copy: registering moves entries
    if (!e.file.empty()) continue;
    for (int p : {2, 4})
      for (int m : {1, 4, 8}) {
        const int v = e.chunks == 0 ? 2 : 1;
        const Placement pl = schedule_placement(e, p, v);
        if ((name == "naive") != (m == 1) || (e.microbatches_multiple_of_stages && m % p)) continue;
        if (name == "dualpipev" && m < 2 * p) continue;
        std::vector<std::vector<Action>> ranks;
        for (int r = 0; r < p; ++r) ranks.push_back(make_schedule(name, p, m, r, pl.chunks));
        const ScheduleFile f = parse_schedule_file("x.sched", format_schedule_file(name, pl, ranks));
        ASSERT_EQ(f.name, name + "-custom");
        EXPECT_EQ(f.placement.kind, pl.kind);
        EXPECT_EQ(f.placement.chunks, pl.chunks);
        EXPECT_EQ(f.split_backward, e.split_backward) << name;
        EXPECT_EQ(f.microbatches, m);
        const std::string mine = register_schedule_file(f);
        for (int r = 0; r < p; ++r) {
          const std::vector<Action> got = compute_only(make_schedule(mine, p, m, r, pl.chunks)),
                                    want = compute_only(ranks[size_t(r)]);
          EXPECT_EQ(got, want) << name << " p=" << p << " m=" << m << " rank " << r;
          for (size_t i = 0; i < got.size() && i < want.size(); ++i)  // the pairs too (F3.0+B1.1)
            EXPECT_EQ(got[i].pair > 0, want[i].pair > 0) << name << " p=" << p << " m=" << m << " rank " << r << " pass " << i;
        }
        const Simulation theirs = simulate_schedule(name, p, m, v, c), ours = simulate_schedule(mine, p, m, v, c);
        EXPECT_TRUE(ours.problem.empty()) << ours.problem;
        EXPECT_TRUE(ours.fifo_consistent);
        EXPECT_NEAR(ours.bubble_fraction, theirs.bubble_fraction, 1e-12) << name << " p=" << p << " m=" << m;
        ++checked;
      }
  }
  // p 2 and 4: naive at m 1, the six others at m 4 and 8, dualpipev (m >= 2p) at m 4 and 8 for p 2, 8 for p 4
  EXPECT_EQ(checked, 2 * (1 + 6 * 2) + 3);
}

TEST(ScheduleFile, ReadsSettingsCommentsAndChunks) {
  const ScheduleFile f = parse_schedule_file("dir/split-gpipe.sched",
                                             "# GPipe over two chunks a rank, backward split\n"
                                             "placement = loop   # virtual stage k = chunk * p + rank\n"
                                             "chunks = 2\n\n"
                                             "rank 1: F0 F1 F0.1 F1.1 B0.1 W0.1 B1.1 W1.1 B0 B1 W0 W1\n"
                                             "rank 0: F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1 W0.1 W1.1 W0 W1\n");
  EXPECT_EQ(f.name, "split-gpipe");  // the file's stem without a name line
  EXPECT_EQ(f.placement.ranks, 2);
  EXPECT_EQ(f.placement.chunks, 2);
  EXPECT_EQ(f.microbatches, 2);
  EXPECT_TRUE(f.split_backward);
  ASSERT_EQ(f.compute.size(), 2u);
  EXPECT_EQ(f.compute[1][2], (Action{ActionKind::forward, 0, -1, 1}));
  EXPECT_EQ(f.compute[0][4], (Action{ActionKind::backward_input, 0, -1, 1}));
  const std::string name = register_schedule_file(f);
  const Simulation s = simulate_schedule(name, 2, 2, 2);
  EXPECT_TRUE(s.problem.empty()) << s.problem;
  // Whole backwards when no W is written.
  EXPECT_FALSE(parse_schedule_file("a", "rank 0: F0 B0\n").split_backward);
  EXPECT_EQ(parse_schedule_file("a", "rank 0: F0 B0\n").compute[0][1].kind, ActionKind::backward);
}

TEST(ScheduleFile, MistakesNameTheLineAndWhatWasExpected) {
  auto has = [](const std::string& text, const std::string& expected) {
    const std::string got = parse_error(text);
    EXPECT_NE(got.find(expected), std::string::npos) << "for:\n" << text << "got: " << got;
  };
  has("rank 0: F0 X0\n", "my.sched:1: expected a pass such as F3");
  has("rank 0: F0 B\n", "expected a pass such as F3");
  has("rank 0: F0 B0.x\n", "expected a pass such as F3");
  has("\n\nrank 0: F0 B0\nrank 0: F0 B0\n", "my.sched:4: rank 0 is listed twice");
  has("rank zero: F0\n", "expected \"rank N: passes\"");
  has("rank 0:\n", "rank 0 has no passes");
  has("speed = 3\nrank 0: F0 B0\n", "my.sched:1: unknown setting \"speed\"");
  has("placement = ring\n", "placement: expected loop or vee");
  has("chunks = 0\n", "chunks: expected a whole number from 1 to 64");
  has("name = a b\n", "name: expected letters, digits");
  has("hello\n", "expected \"rank N: passes\" or a setting");
  has("# nothing\n", "no \"rank N: passes\" lines");
  has("rank 1: F0 B0\n", "expected lines for ranks 0 to 0, got a line for rank 1");
  has("placement = vee\nchunks = 3\nrank 0: F0 B0\n", "placement vee runs 2 chunks per rank");
  has("rank 0: F0 B0 F0.1 B0.1\n", "rank 0 runs chunk 1, but ranks have 1");
  has("rank 0: F0 B0 F0 B0\n", "rank 0 runs F0.0 twice");
  has("rank 0: B0 F0\n", "rank 0 runs B0.0 before F0.0");
  has("rank 0: F0 W0 B0\n", "rank 0 runs W0.0 before B0.0");
  has("rank 0: F0 F1 B0 B1 W0\n", "rank 0 never runs W1.0");
  has("rank 0: F0 F1 B1\n", "rank 0 never runs B0.0");
  has("rank 0: F0 B0 W0\nrank 1: F0 B0\n", "rank 1 never runs W0.0");
  EXPECT_EQ(parse_error("rank 0: F0 B0 W0  # fine\n"), "");
}

TEST(ScheduleFile, BuiltInNamesAreNotTaken) {
  try {
    register_schedule_file(parse_schedule_file("x.sched", "name = 1f1b\nrank 0: F0 B0\n"));
    FAIL() << "a file took a built-in schedule's name";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("name \"1f1b\" is a built-in schedule's"), std::string::npos) << e.what();
  }
  EXPECT_NE(ScheduleRegistry::get("1f1b", "k").help.find("one forward"), std::string::npos);
}

// A deck naming a file runs it under the file's name; the deck's layout must be the file's, and a
// file that would hang is refused before any work, saying which rank waits for what.
TEST(ScheduleFile, DeckRunsTheFileAndRefusesOneThatCannotRun) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + name) << text;
    return dir + name;
  };
  const std::string deck = write("schedule_file.toml",
                                 "[model]\nn_layer = 4\nn_head = 2\nn_embd = 32\nvocab_size = 256\nblock_size = 16\n"
                                 "[data]\ntrain = \"x.bin\"\nseq_len = 16\n[train]\nbatch_size = 4\n"
                                 "[parallel]\npp = 2\nmicrobatches = 2\n");
  const std::string good = write("good.sched", "name = hand\nrank 0: F0 F1 B0 W0 B1 W1\nrank 1: F0 B0 F1 B1 W0 W1\n");
  RunConfig c = RunConfig::load(deck, {"parallel.schedule_file=" + good});
  EXPECT_EQ(c.parallel.schedule, "hand");
  c.validate(2);
  EXPECT_TRUE(ScheduleRegistry::get("hand", "k").split_backward);
  auto refused = [&](const std::vector<std::string>& sets, const std::string& expected) {
    try {
      RunConfig::load(deck, sets).validate(2);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const InputError& e) {
      EXPECT_EQ(e.input(), "parallel.schedule_file");
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({"parallel.schedule_file=" + good, "parallel.microbatches=4", "train.batch_size=8"},
          "is written for 2 pipeline ranks and 2 microbatches");
  // Rank 0 waits for a gradient before it sends microbatch 1, which rank 1 wants first (rank 0
  // receives in sending order: microbatch 1's gradient, then 0's).
  const std::string hangs = write("hangs.sched", "rank 0: F0 B0 F1 B1\nrank 1: F1 B1 F0 B0\n");
  refused({"parallel.schedule_file=" + hangs}, "deadlock: rank 0 waits for the gradient of microbatch 0 from virtual stage 1; "
          "rank 1 waits for the activation of microbatch 1 from virtual stage 0");
  refused({"parallel.schedule_file=" + dir + "missing.sched"}, "missing.sched (no such file)");
}

// The pass lists of a shape are built once a process for a built-in schedule (validation and the
// engine ask for the same): asked again, the same lists, or the same refusal; a file registered again
// under its name gives its new lists, not the ones kept from before.
TEST(ScheduleFile, PassListsKeptForBuiltInsNeverForAFileRegisteredAgain) {
  const PassCosts costs = pass_costs(64, 16);
  const PassLists a = build_pass_lists({"1f1b", 2, 4, 1, costs}), b = build_pass_lists({"1f1b", 2, 4, 1, costs});
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_NE(a.train, build_pass_lists({"gpipe", 2, 4, 1, costs}).train);
  auto refusal = [&] {
    try {
      build_pass_lists({"1f1b", 5000, 1, 1, costs});  // past the stages the proof allows
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string first = refusal();
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(refusal(), first);
  const char* orders[] = {"rank 0: F0 F1 B0 B1\nrank 1: F0 F1 B0 B1\n", "rank 0: F0 B0 F1 B1\nrank 1: F0 B0 F1 B1\n"};
  for (const char* order : orders) {
    const std::string name = register_schedule_file(parse_schedule_file("again.sched", order));
    const PassLists l = build_pass_lists({name, 2, 2, 1, costs});
    EXPECT_EQ(compute_only(l.train[0]), parse_schedule_file("again.sched", order).compute[0]) << order;
  }
}
