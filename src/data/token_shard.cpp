#include "data/token_shard.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace gpt2 {

Shard::Shard(const std::string& path, int vocab_size) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail_input(path, "cannot open token shard: ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t bytes = size_t(st.st_size);
  if (bytes < kShardHeaderBytes) {
    ::close(fd);
    fail_input(path, "truncated token shard: ", bytes, " bytes, expected a 1024-byte header");
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail_input(path, "cannot map token shard: ", std::strerror(errno));
  map_ = m;
  map_bytes_ = bytes;
  int32_t h[3];  // copied: the error paths below unmap the file before formatting the message
  std::memcpy(h, m, sizeof(h));
  auto bad = [&](const auto&... parts) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    fail_input(path, parts...);
  };
  if (h[0] != kShardMagic)
    bad("not a token shard: magic ", h[0], ", expected ", kShardMagic, " (llm.c's format)");
  if (h[1] != kShardVersion) bad("unsupported token shard version ", h[1], ", expected ", kShardVersion);
  if (h[2] < 0) bad("negative token count ", h[2], " in the header");
  count_ = size_t(uint32_t(h[2]));
  if (bytes != kShardHeaderBytes + 2 * count_)
    bad("token shard size is ", bytes, " bytes but its header says ", count_, " tokens (expected ",
        kShardHeaderBytes + 2 * count_, " bytes): truncated or corrupt");
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(m) + kShardHeaderBytes);
  if (vocab_size > 0) {
    const uint16_t* mx = std::max_element(tokens_, tokens_ + count_);
    const size_t token = count_ ? *mx : 0, at = size_t(mx - tokens_);
    if (count_ && token >= size_t(vocab_size))
      bad("holds token ", token, " at position ", at, ", not below model.vocab_size (", vocab_size, ")");
  }
}

Shard::~Shard() {
  if (map_) ::munmap(map_, map_bytes_);
}

Shard::Shard(Shard&& o) noexcept
    : path_(std::move(o.path_)), count_(o.count_), map_(o.map_), map_bytes_(o.map_bytes_),
      tokens_(o.tokens_) {
  o.map_ = nullptr;
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > size_t(INT32_MAX)) fail("write_shard: too many tokens for one shard");
  int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(tokens.size());
  AtomicFile f(path);
  f.write(header, sizeof(header));
  f.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  f.commit();
}

std::vector<std::pair<size_t, size_t>> ShardMask::examples() const {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  for (size_t i = 1; i <= mask.size(); ++i)
    if (i == mask.size() || (mask[i - 1] == 1 && mask[i] == 0)) {
      if (i > begin) out.emplace_back(begin, i);
      begin = i;
    }
  return out;
}

std::string mask_path(const std::string& shard_path) {
  const size_t n = shard_path.size();
  if (n > 4 && shard_path.compare(n - 4, 4, ".bin") == 0) return shard_path.substr(0, n - 4) + ".mask";
  return shard_path + ".mask";
}

ShardMask read_mask(const std::string& path, size_t tokens) {
  const std::string bytes = read_file(path);
  if (bytes.size() < kShardHeaderBytes)
    fail_input(path, "truncated loss mask: ", bytes.size(), " bytes, expected a 1024-byte header");
  int32_t h[4];
  std::memcpy(h, bytes.data(), sizeof(h));
  if (h[0] != kMaskMagic) fail_input(path, "not a loss mask: magic ", h[0], ", expected ", kMaskMagic);
  if (h[1] != kMaskVersion) fail_input(path, "unsupported loss mask version ", h[1], ", expected ", kMaskVersion);
  if (h[2] < 0 || size_t(h[2]) != tokens)
    fail_input(path, "covers ", h[2], " tokens but its shard holds ", tokens, ": the pair was not written together");
  if (h[3] < 0) fail_input(path, "negative example count ", h[3]);
  const size_t want = kShardHeaderBytes + tokens + 4 * size_t(h[3]);
  if (bytes.size() != want)
    fail_input(path, "loss mask size is ", bytes.size(), " bytes, expected ", want, ": truncated or corrupt");
  ShardMask m;
  const char* name = bytes.data() + 64;
  m.source.assign(name, strnlen(name, kShardHeaderBytes - 64));
  m.mask.assign(bytes.begin() + long(kShardHeaderBytes), bytes.begin() + long(kShardHeaderBytes + tokens));
  m.lines.resize(size_t(h[3]));
  std::memcpy(m.lines.data(), bytes.data() + kShardHeaderBytes + tokens, 4 * m.lines.size());
  for (size_t i = 0; i < tokens; ++i)
    if (m.mask[i] > 1) fail_input(path, "mask value ", int(m.mask[i]), " at token ", i, ", expected 0 or 1");
  if (tokens > 0 && (m.mask.front() != 0 || m.mask.back() != 1))
    fail_input(path, "does not hold whole examples (each starts with its source, mask 0, and ends with its target, "
                     "mask 1)");
  const size_t examples = m.examples().size();
  if (examples != m.lines.size())
    fail_input(path, "holds ", examples, " examples but names the lines of ", m.lines.size());
  return m;
}

void write_mask(const std::string& path, const ShardMask& m) {
  if (m.mask.size() > size_t(INT32_MAX) || m.lines.size() > size_t(INT32_MAX)) fail("write_mask: too many tokens");
  int32_t header[256] = {};
  header[0] = kMaskMagic;
  header[1] = kMaskVersion;
  header[2] = int32_t(m.mask.size());
  header[3] = int32_t(m.lines.size());
  char* name = reinterpret_cast<char*>(header) + 64;
  std::strncpy(name, m.source.c_str(), kShardHeaderBytes - 64 - 1);
  AtomicFile f(path);
  f.write(header, sizeof(header));
  f.write(m.mask.data(), m.mask.size());
  f.write(m.lines.data(), m.lines.size() * sizeof(int32_t));
  f.commit();
}

namespace {
std::vector<std::string> matches(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}
}  // namespace

bool has_loss_masks(const std::string& pattern) {
  for (const std::string& p : matches(pattern))
    if (file_exists(mask_path(p))) return true;
  return false;
}

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& key) {
  std::vector<std::string> out = matches(pattern);
  if (out.empty())
    fail_input(key, "no token shard matches \"", pattern, "\" (run `gpt2 prepare` first?)");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpt2
