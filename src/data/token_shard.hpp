#pragma once
// Token shards in llm.c's format: a 1024-byte header of 256 int32 (magic 20240520, version 1, token
// count, rest zero), then the tokens as uint16. The file size must be exactly 1024 + 2 * count.
#include <cstdint>
#include <string>
#include <utility>
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

// ---- Loss masks (translation pairs, `gpt2 prepare --pairs`) ----------------------------------------
// A side file beside a shard, DIR/train_000.mask beside DIR/train_000.bin: a 1024-byte header of
// 256 int32 (magic 20240522, version 1, token count -- the shard's --, example count; bytes 64..1023
// the pairs file's name, NUL-terminated), then one uint8 per token (1: a target the loss counts, 0:
// not), then each example's line in the pairs file (int32). The shard is a run of examples, each
// source + separator (mask 0) then target + end of text (mask 1), so an example starts where a 1 is
// followed by a 0. A shard without a mask file is plain text: every token counts.
constexpr int32_t kMaskMagic = 20240522;
constexpr int32_t kMaskVersion = 1;

struct ShardMask {
  std::vector<uint8_t> mask;   // per token
  std::vector<int32_t> lines;  // per example: its line in the pairs file (1-based)
  std::string source;          // the pairs file
  // The examples as [begin, end) token ranges, from the mask's 1 -> 0 steps.
  std::vector<std::pair<size_t, size_t>> examples() const;
};

std::string mask_path(const std::string& shard_path);  // x.bin -> x.mask (else x + ".mask")
// Reads and validates a mask file against its shard's token count: InputError naming the file.
ShardMask read_mask(const std::string& path, size_t tokens);
// Writes one atomically. mask.size() must be the shard's token count, lines one per example.
void write_mask(const std::string& path, const ShardMask& m);

// Expands a path or glob ("data/x/train_*.bin") into sorted file names; InputError naming `key`
// when nothing matches.
std::vector<std::string> expand_glob(const std::string& pattern, const std::string& key);
// Whether any shard the pattern matches has a loss mask beside it (false when nothing matches).
bool has_loss_masks(const std::string& pattern);

}  // namespace gpt2
