// What keeps a production run safe: stop signals, non-finite steps, the checkpoint folder (its
// lock, pruning, resume candidates), outputs checked before step 1, shapes checked before any
// allocation, decks that cannot be their own base, and metrics that continue after a resume.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "../common/tiny_data.hpp"
#include "core/direct_writer.hpp"
#include "core/error.hpp"
#include "core/fs.hpp"
#include "formats/checkpoint.hpp"
#include "formats/checkpoint_dir.hpp"
#include "formats/checkpoint_h5.hpp"
#include "formats/model_file.hpp"
#include "runtime/stop_signals.hpp"
#include "train/metrics.hpp"
#include "train/nonfinite.hpp"
#include "train/run_config.hpp"

using namespace gpt2;

namespace {
std::string dir() {
  static const std::string d = test::temp_dir("reliability");
  return d;
}

// A fresh sub-folder of dir().
std::string folder(const std::string& name) {
  const std::string f = dir() + "/" + name;
  std::system(("rm -rf '" + f + "'").c_str());
  make_dirs(f, "test");
  return f;
}

void touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof(h) - 1);
  return h;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST(StopSignals, FirstSignalOnlyFlagsRepeatsCountOnceALaterOneEndsTheProcess) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // exit codes say how far it got; death by SIGTERM is the pass
    StopSignals s;
    if (StopSignals::pending() != 0) ::_exit(10);
    ::raise(SIGUSR1);
    if (StopSignals::pending() != SIGUSR1) ::_exit(11);
    ::raise(SIGTERM);  // the same request by a second path: no effect
    if (StopSignals::pending() != SIGUSR1) ::_exit(12);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ::raise(SIGTERM);  // a second request: the default action
    ::_exit(13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_STREQ(StopSignals::name(SIGUSR1), "SIGUSR1");
  EXPECT_STREQ(StopSignals::name(SIGHUP), "signal 1");
}

TEST(StopSignals, HandlersAreRestoredAndReclaimed) {
  struct sigaction before {}, during {};
  ::sigaction(SIGUSR1, nullptr, &before);
  {
    StopSignals s;
    ::signal(SIGUSR1, SIG_IGN);  // a library taking the signal (MPICH's MPI_Init does)
    s.reclaim();
    ::sigaction(SIGUSR1, nullptr, &during);
    EXPECT_NE(during.sa_handler, SIG_IGN);
    EXPECT_NE(during.sa_handler, before.sa_handler);
    EXPECT_THROW(StopSignals(), std::logic_error);  // one at a time
  }
  struct sigaction after {};
  ::sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

TEST(NonFinite, NamesWhatIsNotFinite) {
  const double nan = std::nan(""), inf = HUGE_VAL;
  EXPECT_EQ(nonfinite_values(2.5, 1.0), "");
  EXPECT_EQ(nonfinite_values(nan, 1.0), "loss (nan)");
  EXPECT_EQ(nonfinite_values(1.0, inf), "gradient norm (inf)");
  EXPECT_EQ(nonfinite_values(-inf, nan), "loss (-inf) and gradient norm (nan)");
}

TEST(InputDeck, ResumeTakesTrueFalseOrAutoAndWritesThemBack) {
  const std::string path = dir() + "/resume.toml";
  std::ofstream(path) << "[data]\ntrain = \"x.bin\"\n[checkpoint]\ndir = \"ck\"\nresume = true\n";
  RunConfig c = RunConfig::load(path);
  EXPECT_TRUE(c.checkpoint.resume == Toggle::on);
  EXPECT_NE(c.toml().find("resume = true\n"), std::string::npos);
  c = RunConfig::load(path, {"checkpoint.resume=auto"});
  EXPECT_TRUE(c.checkpoint.resume == Toggle::automatic);
  EXPECT_NE(c.toml().find("resume = \"auto\"\n"), std::string::npos);
  c.validate();
  c = RunConfig::load(path, {"checkpoint.resume=false"});
  EXPECT_TRUE(c.checkpoint.resume == Toggle::off);
  EXPECT_EQ(error_of([&] { RunConfig::load(path, {"checkpoint.resume=1"}); }),
            "checkpoint.resume: expected true, false or \"auto\", got an integer");
  EXPECT_EQ(error_of([&] { RunConfig::load(path, {"checkpoint.resume=later"}); }),
            "checkpoint.resume: expected true, false or \"auto\", got \"later\"");
  // The effective configuration reads back to itself with each value.
  for (const char* v : {"true", "false", "auto"}) {
    const std::string text = RunConfig::load(path, {std::string("checkpoint.resume=") + v}).toml();
    std::ofstream(dir() + "/resume_again.toml") << text;
    EXPECT_EQ(RunConfig::load(dir() + "/resume_again.toml").toml(), text);
  }
}

TEST(InputDeck, BaseMustBeAnotherDeck) {
  const std::string d = folder("bases");
  touch(d + "/dot.toml", "base = \".\"\n");
  touch(d + "/self.toml", "base = \"self.toml\"\n");
  touch(d + "/a.toml", "base = \"b.toml\"\n");
  touch(d + "/b.toml", "base = \"./a.toml\"\n");
  touch(d + "/empty.toml", "base = \"\"\n");
  EXPECT_EQ(error_of([&] { RunConfig::load(d + "/dot.toml"); }),
            d + "/dot.toml: base: " + d + "/. is a folder, expected another deck (a TOML file)");
  EXPECT_EQ(error_of([&] { RunConfig::load(d + "/self.toml"); }),
            d + "/self.toml: base: " + d + "/self.toml is this deck itself, expected another deck");
  EXPECT_EQ(error_of([&] { RunConfig::load(d + "/a.toml"); }),
            d + "/b.toml: base: " + d + "/./a.toml is a deck that leads here (a cycle), expected another deck");
  EXPECT_EQ(error_of([&] { RunConfig::load(d + "/empty.toml"); }),
            d + "/empty.toml: base: is empty, expected the path of another deck");
}

TEST(Outputs, FoldersAndFilesAreCheckedBeforeTheRunWritesThem) {
  const std::string d = folder("outputs");
  touch(d + "/file");
  EXPECT_EQ(error_of([&] { make_dirs(d + "/file", "checkpoint.dir"); }),
            "checkpoint.dir: " + d + "/file is a file, expected a folder");
  EXPECT_EQ(error_of([&] { make_dirs(d + "/file/sub", "checkpoint.dir"); }),
            "checkpoint.dir: " + d + "/file is a file, expected a folder");
  EXPECT_EQ(error_of([&] { prepare_output_file(d, "trace.file"); }),
            "trace.file: " + d + " is a folder, expected a file name");
  EXPECT_EQ(error_of([&] { prepare_output_file(d + "/file/t.h5", "trace.file"); }),
            "trace.file: " + d + "/file is a file, expected a folder");
  EXPECT_EQ(error_of([&] { prepare_output_file(d + "/new/deeper/m.jsonl", "--metrics-jsonl"); }), "no error");
  EXPECT_TRUE(is_directory(d + "/new/deeper"));
  EXPECT_FALSE(file_exists(d + "/new/deeper/m.jsonl"));  // nothing written yet
}

TEST(CheckpointDir, ListsByStepPicksResumeCandidatesAndPrunes) {
  const std::string d = folder("ckdir");
  for (const char* n : {"ckpt_00000002.bin", "ckpt_00000010.bin", "ckpt_00000004.bin", "ckpt_123456789.bin",
                        "ckpt_00000003.bin.tmp.99", "ckpt_x.bin", "notes.txt"})
    touch(d + "/" + n);
  std::vector<long long> steps;
  for (const auto& [s, path] : list_checkpoints(d)) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<long long>{2, 4, 10, 123456789}));
  // latest names step 10: it comes first, then the older ones; the later one is another run's.
  publish_checkpoint(d, "ckpt_00000010.bin");
  EXPECT_EQ(resume_candidates(d), (std::vector<std::string>{d + "/ckpt_00000010.bin", d + "/ckpt_00000004.bin",
                                                            d + "/ckpt_00000002.bin"}));
  prune_checkpoints(d, 2, 10);
  steps.clear();
  for (const auto& [s, path] : list_checkpoints(d)) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<long long>{4, 10, 123456789}));
  prune_checkpoints(d, 0, 10);  // keep = 0: keep all
  EXPECT_EQ(list_checkpoints(d).size(), 3u);
  std::remove((d + "/latest").c_str());  // without latest: all, newest first
  EXPECT_EQ(resume_candidates(d).front(), d + "/ckpt_123456789.bin");
}

TEST(CheckpointDir, LockKeepsASecondRunOutAndIsTakenOverFromTheDead) {
  const std::string d = folder("lock"), lock = d + "/lock";
  const std::string me = host() + " " + std::to_string(::getpid()) + "\n";
  {
    CheckpointDirLock held(d, "checkpoint.dir");
    EXPECT_EQ(slurp(lock), me);
    EXPECT_EQ(error_of([&] { CheckpointDirLock again(d, "checkpoint.dir"); }),
              "checkpoint.dir: " + d + " is in use by another run (host " + host() + ", pid " +
                  std::to_string(::getpid()) + "): two runs must not write one checkpoint folder (if that run is "
                  "gone, remove " + lock + ")");
  }
  EXPECT_FALSE(file_exists(lock));  // released
  // Left by a process that is gone (same host): taken over.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  touch(lock, host() + " " + std::to_string(dead) + "\n");
  {
    CheckpointDirLock taken(d, "checkpoint.dir");
    EXPECT_EQ(slurp(lock), me);
  }
  // A live process on this host that holds no flock (a file system without flock): still busy.
  touch(lock, host() + " 1\n");
  EXPECT_NE(error_of([&] { CheckpointDirLock busy(d, "checkpoint.dir"); }).find("(host " + host() + ", pid 1)"),
            std::string::npos);
  std::remove(lock.c_str());
}

TEST(ModelFile, AbsurdShapeIsRefusedBeforeAnythingIsAllocated) {
  CheckpointMeta meta;
  meta.model.n_layer = 1 << 20, meta.model.n_head = 16, meta.model.n_embd = 1 << 14;
  meta.model.vocab_size = 64, meta.model.block_size = 16;
  const std::string path = dir() + "/absurd.bin";
  {
    CheckpointWriter w(path, meta, 16, {"params"});
    const std::vector<float> sixteen(16, 1.0f);
    w.append(sixteen.data(), 16);
    w.commit();
  }
  const std::string e = error_of([&] { ModelFile(path, "--checkpoint").read_all(); });
  EXPECT_NE(e.find("corrupt checkpoint: section params holds 64 bytes, the model shape"), std::string::npos) << e;
  meta.model.n_head = 3;  // 2^14 channels do not divide into 3 heads
  {
    CheckpointWriter w(path, meta, 16, {"params"});
    const std::vector<float> sixteen(16, 1.0f);
    w.append(sixteen.data(), 16);
    w.commit();
  }
  EXPECT_NE(error_of([&] { ModelFile(path, "--checkpoint"); }).find("invalid model shape"), std::string::npos);
}

TEST(Checkpoint, CountsOptimizerUpdatesApartFromSteps) {
  CheckpointMeta meta;
  meta.model.n_layer = 1, meta.model.n_head = 1, meta.model.n_embd = 4, meta.model.vocab_size = 8;
  meta.model.block_size = 4;
  meta.step = 9, meta.updates = 7;
  const std::string path = dir() + "/updates.bin";
  CheckpointWriter w(path, meta, 2, {"params"});
  const float two[2] = {1, 2};
  w.append(two, 2);
  w.commit();
  EXPECT_EQ(CheckpointReader(path).meta().updates, 7);
  EXPECT_EQ(CheckpointReader(path).meta().step, 9);
}

TEST(Metrics, ResumedRunKeepsTheLinesUpToItsStepAndAppends) {
  const std::string path = dir() + "/metrics.jsonl";
  {
    MetricsLog fresh(path);
    for (int s = 1; s <= 5; ++s) {
      StepMetrics m;
      m.step = s, m.loss = s == 5 ? std::nan("") : 1.0 / s;
      fresh.step(m);
      if (s == 2) fresh.eval(2, 0.5);
    }
  }
  EXPECT_NE(slurp(path).find("\"step\": 5, \"loss\": null"), std::string::npos);  // JSON has no NaN
  {
    MetricsLog resumed(path, 3);
    StepMetrics m;
    m.step = 4, m.loss = 0.25, m.skipped = true;
    resumed.step(m);
  }
  std::vector<long long> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) steps.push_back(std::atoll(line.c_str() + line.find(": ") + 2));
  EXPECT_EQ(steps, (std::vector<long long>{1, 2, 2, 3, 4}));
  EXPECT_NE(slurp(path).find("\"skipped\": true,"), std::string::npos);
}

// The checkpoint's checksum of a run, one vectorised pass, equals the sum of its elements' terms in
// any split (the decomposition-independence that lets any layout verify a file).
TEST(Checkpoint, RunChecksumIsTheSumOfElementTermsInAnySplit) {
  std::vector<float> v(1237);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(std::sin(double(i))) * 1e3f;
  uint64_t want = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    want = (want + element_checksum(5000 + i, bits)) & kChecksumMask;
  }
  EXPECT_EQ(run_checksum(v.data(), 5000, v.size()), want);
  const uint64_t split = (run_checksum(v.data(), 5000, 401) + run_checksum(v.data() + 401, 5401, v.size() - 401)) &
                         kChecksumMask;
  EXPECT_EQ(split, want);
  EXPECT_NE(run_checksum(v.data(), 5001, v.size()), want) << "the index is part of the term";
}

// The direct writer puts runs with unaligned ends, runs inside one block and runs longer than its
// buffers where they belong, whether or not the file system takes O_DIRECT.
TEST(DirectWriterTest, RunsLandAtTheirOffsets) {
  const std::string path = test::temp_dir("direct_writer") + "/file.bin";
  const size_t size = 9 * DirectWriter::kBlock + 123;
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(size, '\0');
  }
  std::vector<char> want(size, 0);
  struct Run {
    uint64_t at;
    size_t bytes;
  };
  const std::vector<Run> runs = {{4, 400}, {DirectWriter::kBlock - 8, 5 * DirectWriter::kBlock + 16},
                                 {7 * DirectWriter::kBlock, DirectWriter::kBlock * 2}, {size - 60, 60}};
  {
    DirectWriter w(path, 2 * DirectWriter::kBlock);  // runs longer than a buffer
    for (const Run& r : runs) {
      for (size_t i = 0; i < r.bytes; ++i) want[r.at + i] = char((r.at + i) % 251 + 1);
      w.write(r.at, r.bytes, [&](char* dst, size_t from, size_t n) {
        for (size_t i = 0; i < n; ++i) dst[i] = char((r.at + from + i) % 251 + 1);
      });
    }
    EXPECT_EQ(w.finish(), "");
    EXPECT_EQ(w.bytes(), 400 + 5 * DirectWriter::kBlock + 16 + 2 * DirectWriter::kBlock + 60);
  }
  std::ifstream f(path, std::ios::binary);
  const std::vector<char> got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(got.size(), size);
  size_t wrong = 0;
  for (size_t i = 0; i < size; ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0u);
}
