#include "formats/checkpoint.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace gpt2 {

namespace {
constexpr char kMagic[8] = {'G', 'P', 'T', '2', 'K', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
constexpr size_t kNameLen = 24;
struct Entry {
  char name[kNameLen];
  uint64_t offset, bytes, hash;
};

std::string meta_bytes(const CheckpointMeta& m) {
  std::string s(8 + 32, '\0');
  std::memcpy(&s[0], &m.step, 8);
  std::memcpy(&s[8], m.rng.data(), 32);
  return s;
}
std::string model_bytes(const ModelConfig& c) {
  const int32_t v[5] = {c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.block_size};
  return std::string(reinterpret_cast<const char*>(v), sizeof(v));
}
}  // namespace

uint64_t checksum(const void* data, size_t bytes, uint64_t seed) {
  ChecksumStream h(seed);
  h.update(data, bytes);
  return h.digest();
}

struct CheckpointWriter::Impl {
  AtomicFile file;
  std::vector<Entry> entries;
  size_t current = 0, written = 0, num_params;
  ChecksumStream hash;
  Impl(const std::string& path, size_t n) : file(path), num_params(n) {}
};

CheckpointWriter::CheckpointWriter(const std::string& path, const CheckpointMeta& meta,
                                   size_t num_params, const std::vector<std::string>& floats)
    : impl_(new Impl(path, num_params)) {
  const int64_t updates = meta.updates >= 0 ? meta.updates : meta.step;
  std::vector<std::pair<std::string, std::string>> small = {
      {"model", model_bytes(meta.model)},
      {"meta", meta_bytes(meta)},
      {"config", meta.config_toml},
      {"optimizer", meta.optimizer},
      {"updates", std::string(reinterpret_cast<const char*>(&updates), sizeof(updates))},
      {"loss_scale", std::string(reinterpret_cast<const char*>(&meta.loss_scale), sizeof(double)) +
                         std::string(reinterpret_cast<const char*>(&meta.loss_scale_clean), sizeof(int64_t))}};
  const uint32_t nsec = uint32_t(small.size() + floats.size());
  uint64_t offset = 16 + nsec * sizeof(Entry);
  for (const auto& [name, bytes] : small) {
    Entry e{};
    std::strncpy(e.name, name.c_str(), kNameLen - 1);
    e.offset = offset, e.bytes = bytes.size(), e.hash = checksum(bytes.data(), bytes.size());
    impl_->entries.push_back(e);
    offset += bytes.size();
  }
  for (const std::string& name : floats) {
    Entry e{};
    std::strncpy(e.name, name.c_str(), kNameLen - 1);
    e.offset = offset, e.bytes = num_params * sizeof(float), e.hash = 0;  // hash filled at commit
    impl_->entries.push_back(e);
    offset += e.bytes;
  }
  impl_->current = small.size();
  // Header with placeholder hashes for the float sections; rewritten before commit.
  impl_->file.write(kMagic, 8);
  impl_->file.write(&kVersion, 4);
  impl_->file.write(&nsec, 4);
  impl_->file.write(impl_->entries.data(), impl_->entries.size() * sizeof(Entry));
  for (const auto& s : small) impl_->file.write(s.second.data(), s.second.size());
}

CheckpointWriter::~CheckpointWriter() { delete impl_; }

void CheckpointWriter::append(const float* data, size_t n) {
  Impl& I = *impl_;
  if (I.current >= I.entries.size() || I.written + n > I.num_params)
    fail("CheckpointWriter: more data than the declared sections");
  I.file.write(data, n * sizeof(float));
  I.hash.update(data, n * sizeof(float));
  I.written += n;
  if (I.written == I.num_params) {
    I.entries[I.current].hash = I.hash.digest();
    I.hash = ChecksumStream();
    I.written = 0;
    ++I.current;
  }
}

void CheckpointWriter::commit() {
  Impl& I = *impl_;
  if (I.current != I.entries.size()) fail("CheckpointWriter: sections incomplete at commit");
  // Rewrite the section table with the float sections' hashes, then make it durable.
  I.file.patch(16, I.entries.data(), I.entries.size() * sizeof(Entry));
  I.file.commit();
}

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) fail_input(path, "cannot open checkpoint: ", std::strerror(errno));
  // A constructor that throws gets no destructor call: close the file on every error below.
  struct CloseOnError {
    std::FILE*& f;
    bool armed = true;
    ~CloseOnError() {
      if (!armed) return;
      std::fclose(f);
      f = nullptr;
    }
  } close_on_error{f_};
  char magic[8];
  uint32_t version = 0, nsec = 0;
  if (std::fread(magic, 1, 8, f_) != 8 || std::memcmp(magic, kMagic, 8) != 0)
    fail_input(path, "not a gpt2-kokkos checkpoint (bad magic)");
  if (std::fread(&version, 4, 1, f_) != 1 || version != kVersion)
    fail_input(path, "unsupported checkpoint version ", version, ", expected ", kVersion);
  if (std::fread(&nsec, 4, 1, f_) != 1 || nsec > 64) fail_input(path, "corrupt checkpoint header");
  std::vector<Entry> entries(nsec);
  if (std::fread(entries.data(), sizeof(Entry), nsec, f_) != nsec)
    fail_input(path, "truncated checkpoint header");
  std::fseek(f_, 0, SEEK_END);
  const uint64_t size = uint64_t(std::ftell(f_));
  for (Entry& e : entries) {
    e.name[kNameLen - 1] = 0;
    if (e.offset > size || e.bytes > size - e.offset)  // (offset + bytes could wrap around)
      fail_input(path, "truncated checkpoint: section ", e.name, " ends at byte ", e.offset + e.bytes,
                 " of ", size);
    sections_[e.name] = {e.offset, e.bytes, e.hash};
  }
  auto small = [&](const char* name) {
    auto it = sections_.find(name);
    if (it == sections_.end()) fail_input(path, "checkpoint lacks its ", name, " section");
    std::string s(it->second.bytes, '\0');
    std::fseek(f_, long(it->second.offset), SEEK_SET);
    if (!s.empty() && std::fread(&s[0], 1, s.size(), f_) != s.size())
      fail_input(path, "cannot read section ", name);
    if (checksum(s.data(), s.size()) != it->second.hash)
      fail_input(path, "checksum mismatch in section ", name, ": the checkpoint is corrupt");
    return s;
  };
  const std::string model = small("model"), meta = small("meta");
  if (model.size() != 20 || meta.size() != 40) fail_input(path, "corrupt checkpoint metadata");
  int32_t v[5];
  std::memcpy(v, model.data(), 20);
  meta_.model.n_layer = v[0], meta_.model.n_head = v[1], meta_.model.n_embd = v[2];
  meta_.model.vocab_size = v[3], meta_.model.block_size = v[4];
  std::memcpy(&meta_.step, meta.data(), 8);
  std::memcpy(meta_.rng.data(), meta.data() + 8, 32);
  meta_.config_toml = small("config");
  meta_.optimizer = small("optimizer");
  meta_.updates = meta_.step;
  if (has("updates")) {
    const std::string u = small("updates");
    if (u.size() != sizeof(int64_t)) fail_input(path, "corrupt checkpoint metadata (updates)");
    std::memcpy(&meta_.updates, u.data(), sizeof(int64_t));
  }
  if (has("loss_scale")) {  // (checkpoints from before mixed precision have none)
    const std::string u = small("loss_scale");
    if (u.size() != 16) fail_input(path, "corrupt checkpoint metadata (loss_scale)");
    std::memcpy(&meta_.loss_scale, u.data(), 8);
    std::memcpy(&meta_.loss_scale_clean, u.data() + 8, 8);
  }
  close_on_error.armed = false;
}

CheckpointReader::~CheckpointReader() {
  if (f_) std::fclose(f_);
}

uint64_t CheckpointReader::bytes(const std::string& section) const {
  auto it = sections_.find(section);
  return it == sections_.end() ? 0 : it->second.bytes;
}

void CheckpointReader::read(const std::string& section, size_t begin, size_t n, float* dst) const {
  auto it = sections_.find(section);
  if (it == sections_.end()) fail_input(path_, "checkpoint has no section ", section);
  const uint64_t floats = it->second.bytes / sizeof(float);  // (begin + n) * 4 could wrap around
  if (begin > floats || n > floats - begin)
    fail_input(path_, "section ", section, " is smaller than the model needs");
  std::fseek(f_, long(it->second.offset + begin * sizeof(float)), SEEK_SET);
  if (std::fread(dst, sizeof(float), n, f_) != n) fail_input(path_, "cannot read section ", section);
}

void CheckpointReader::verify() const {
  uint64_t largest = 0;  // a buffer of up to 16 MiB, no larger than the largest section
  for (const auto& entry : sections_) largest = std::max(largest, entry.second.bytes);
  std::vector<char> buf(size_t(std::min<uint64_t>(largest, uint64_t(1) << 24)));
  for (const auto& [name, s] : sections_) {
    ChecksumStream h;
    std::fseek(f_, long(s.offset), SEEK_SET);
    for (uint64_t left = s.bytes; left > 0;) {
      const size_t n = size_t(std::min<uint64_t>(left, buf.size()));
      if (std::fread(buf.data(), 1, n, f_) != n) fail_input(path_, "cannot read section ", name);
      h.update(buf.data(), n);
      left -= n;
    }
    if (h.digest() != s.hash)
      fail_input(path_, "checksum mismatch in section ", name, ": the checkpoint is corrupt");
  }
}

bool is_native_checkpoint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char m[8] = {};
  const bool ok = std::fread(m, 1, 8, f) == 8 && std::memcmp(m, kMagic, 8) == 0;
  std::fclose(f);
  return ok;
}

}  // namespace gpt2
