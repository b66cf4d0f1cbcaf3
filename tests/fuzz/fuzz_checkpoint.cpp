// libFuzzer harness: our checkpoint reader (formats/checkpoint.hpp). The input is a whole checkpoint
// file. It is opened, every section's checksum verified, and the float sections read the way
// `gpt2 sample` / resume read them (whole, and in pieces), plus reads that must be refused (past
// the end, absurd offsets, missing sections). Accepted outcomes: success or InputError.
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz_common.hpp"
#include "formats/checkpoint.hpp"
#include "model/param_layout.hpp"

using namespace gpt2;

namespace {
// Reads a section in chunks until the reader refuses (the end of the section).
void read_all(const CheckpointReader& r, const std::string& name) {
  constexpr size_t kChunk = 1024, kMaxChunks = 64;
  std::vector<float> buf(kChunk);
  for (size_t c = 0; c < kMaxChunks; ++c)
    if (!fuzz::expect_only_input_errors("CheckpointReader::read", [&] {
          r.read(name, c * kChunk, kChunk, buf.data());
        }))
      break;
  // Must be refused, not wrap around: begin or begin + n past SIZE_MAX / sizeof(float).
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  for (const auto& bn : {std::pair<size_t, size_t>{huge, 1}, {1, huge}, {huge, huge}})
    if (fuzz::expect_only_input_errors("CheckpointReader::read", [&] { r.read(name, bn.first, bn.second, buf.data()); }))
      fuzz::finding("read(", name, ", ", bn.first, ", ", bn.second, ") succeeded");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::FdLeakCheck fd_leak_check;
  static fuzz::InputFile file("checkpoint");
  const std::string& path = file.write(data, size);
  (void)is_native_checkpoint(path);
  fuzz::expect_only_input_errors("CheckpointReader", [&] {
    CheckpointReader r(path);
    const CheckpointMeta& m = r.meta();
    const bool verified = fuzz::expect_only_input_errors("verify", [&] { r.verify(); });
    for (const char* name : {"params", "opt.m", "opt.v", "model", "config", "no.such.section"})
      if (r.has(name) || name[0] == 'n') read_all(r, name);
    // What `gpt2 sample --checkpoint` does next: the model shape, then all parameters.
    m.model.validate();
    const double C = m.model.n_embd, L = m.model.n_layer;
    const double approx = (m.model.padded_vocab() + double(m.model.block_size)) * C + L * (12 * C * C + 13 * C);
    if (!verified || approx > double(size)) return;  // cannot be in the file: the read would refuse
    std::vector<float> params(ParamLayout(m.model).total());
    r.read("params", 0, params.size(), params.data());
  });
  return 0;
}
