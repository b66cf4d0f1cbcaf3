// libFuzzer harness: the input deck (core/input_deck.hpp) bound to the run configuration
// (train/run_config.hpp), as `gpt2 train/info CONFIG --set ...` do. The input is the deck's text,
// then, after each NUL byte, one `--set` assignment. Accepted outcomes: InputError anywhere; and
// for a deck that binds, the effective configuration (RunConfig::toml(), what checkpoints and
// traces store) must read back to the same configuration.
//
// The deck's source is <sandbox>/deck.toml, so `base = "..."` resolves in a folder this harness
// fills at start-up: a valid base deck, a base that chains to it, a cycle and a broken one.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/input_deck.hpp"
#include "fuzz_common.hpp"
#include "train/run_config.hpp"

using namespace gpt2;

namespace {
struct Sandbox {
  std::string dir;
  Sandbox() {
    const std::string tmp = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir = tmp + "/gpt2-fuzz-config-" + std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0700);
    put("base.toml", "[model]\nn_layer = 2\nn_head = 2\nn_embd = 8\nvocab_size = 256\nblock_size = 16\n"
                     "[data]\ntrain = \"data/train_*.bin\"\nseq_len = 8\n[train]\nbatch_size = 4\n");
    put("chained.toml", "base = \"base.toml\"\n[parallel]\ndp = 2\n");
    put("cycle.toml", "base = \"cycle.toml\"\n");
    put("broken.toml", "[model\nn_layer = \n");
    put("notable.toml", "model = 3\n");
  }
  ~Sandbox() {
    for (const char* f : {"base.toml", "chained.toml", "cycle.toml", "broken.toml", "notable.toml"})
      std::remove((dir + "/" + f).c_str());
    ::rmdir(dir.c_str());
  }
  void put(const char* name, const char* text) { std::ofstream(dir + "/" + name) << text; }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::FdLeakCheck fd_leak_check;
  static const Sandbox sandbox;
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    const size_t nul = input.find('\0', pos);
    parts.push_back(input.substr(pos, nul == std::string::npos ? std::string::npos : nul - pos));
    if (nul == std::string::npos) break;
    pos = nul + 1;
  }
  fuzz::expect_only_input_errors("deck", [&] {
    InputDeck deck = InputDeck::from_string(parts[0], sandbox.dir + "/deck.toml");
    for (size_t i = 1; i < parts.size(); ++i) deck.set(parts[i]);
    RunConfig c;
    deck.bind(c.fields());
    for (const int world_size : {0, 1, 4})
      fuzz::expect_only_input_errors("RunConfig::validate", [&] { c.validate(world_size); });
    // The effective configuration is TOML that binds back to itself.
    const std::string text = c.toml();
    RunConfig back;
    if (!fuzz::expect_only_input_errors("round trip", [&] {
          InputDeck::from_string(text, "effective.toml").bind(back.fields());
        }))
      fuzz::finding("the effective configuration does not read back:\n", text);
    if (back.toml() != text)
      fuzz::finding("the effective configuration reads back different:\n", text, "\n---\n", back.toml());
  });
  return 0;
}
