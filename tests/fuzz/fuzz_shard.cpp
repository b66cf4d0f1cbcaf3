// libFuzzer harness: the token shard reader (data/shard.hpp). The input is a whole shard file.
// Accepted outcomes: InputError (truncated, bad magic/version/count, token >= vocabulary), or a
// Shard whose size matches the file exactly and whose every token is readable and in range.
#include <cstdint>

#include "data/token_shard.hpp"
#include "fuzz_common.hpp"

using namespace gpt2;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::FdLeakCheck fd_leak_check;
  static fuzz::InputFile file("shard");
  const std::string& path = file.write(data, size);
  for (const int vocab : {0, 256, 50257}) {  // no vocabulary check, the byte tokenizer's, GPT-2's
    fuzz::expect_only_input_errors("Shard", [&] {
      Shard shard(path, vocab);
      if (kShardHeaderBytes + 2 * shard.size() != size)
        fuzz::finding("accepted a shard of ", size, " bytes holding ", shard.size(), " tokens");
      Shard s(std::move(shard));  // the move leaves one owner of the mapping
      uint64_t sum = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        const uint16_t t = s.tokens()[i];
        if (vocab > 0 && t >= vocab) fuzz::finding("accepted token ", t, " >= vocabulary ", vocab);
        sum += t;
      }
      if (s.size() == 0 && sum != 0) fuzz::finding("empty shard with tokens");
    });
  }
  return 0;
}
