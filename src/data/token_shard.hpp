#pragma once
// Token shards in llm.c's format: a 1024-byte header of 256 int32 (magic 20240520, version 1, token
// count, rest zero), then the tokens as uint16. The file size must be exactly 1024 + 2 * count.
#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 1024;

// A read-only memory map of one validated shard.
class Shard {
 public:
  // Validates header and size; with vocab_size > 0 also that every token is below it.
  // Throws InputError naming the file and what was expected.
  explicit Shard(const std::string& path, int vocab_size = 0);
  ~Shard();
  Shard(Shard&& o) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  Shard& operator=(Shard&&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return count_; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  std::string path_;
  size_t count_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
};

// Writes a shard atomically (temporary file, then rename). Tokens must fit in uint16.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Expands a path or glob ("data/x/train_*.bin") into sorted file names; InputError naming `key`
// when nothing matches.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& key);

}  // namespace gpt2
