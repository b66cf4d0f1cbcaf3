// What keeps a production run safe: shapes checked before any allocation, decks that cannot be
// their own base.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "../common/tiny_data.hpp"
#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/model_file.hpp"
#include "train/run_config.hpp"

using namespace gpt2;

namespace {
std::string dir() {
  static const std::string d = test::temp_dir("reliability");
  return d;
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
}  // namespace

TEST(InputDeck, BaseMustBeAnotherDeck) {
  const std::string d = dir() + "/bases";
  std::system(("mkdir -p '" + d + "'").c_str());
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

