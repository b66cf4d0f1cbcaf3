#pragma once
// Small deterministic token data for tests: a shard of pseudo-text (a repeating, noisy pattern a tiny
// model can learn) written into a temporary folder. Tests make their own data; nothing outside the
// repository is needed.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/fs.hpp"
#include "core/rng.hpp"
#include "data/token_shard.hpp"

namespace gpt2::test {

inline std::vector<uint16_t> pseudo_text(size_t n, int vocab, uint64_t seed) {
  Rng r(seed, 5);
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = uint16_t(r.uniform() < 0.8 ? (i * 7 + i / 13) % vocab : r.below(uint64_t(vocab)));
  return t;
}

// A fresh folder under $TMPDIR (or /tmp) named after `tag`; the caller's rank 0 makes it.
inline std::string temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string d = std::string(base && *base ? base : "/tmp") + "/gpt2-test-" + tag + "-" +
                  std::to_string(::getuid());
  make_dirs(d, "test folder");
  return d;
}

}  // namespace gpt2::test
