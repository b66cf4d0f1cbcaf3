#include "formats/llmc_io.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "model/param_layout.hpp"

namespace gpt2 {

namespace {
const Param kFileOrder[] = {Param::wte,      Param::wpe,      Param::ln1w, Param::ln1b,
                            Param::qkvw,     Param::qkvb,     Param::attprojw, Param::attprojb,
                            Param::ln2w,     Param::ln2b,     Param::fcw,  Param::fcb,
                            Param::fcprojw,  Param::fcprojb,  Param::lnfw, Param::lnfb};
bool per_layer(Param p) { return p != Param::wte && p != Param::wpe && p != Param::lnfw && p != Param::lnfb; }

// Calls f(range in our layout) in file order.
template <class F>
void for_each_in_file_order(const ParamLayout& layout, F f) {
  for (Param p : kFileOrder) {
    if (!per_layer(p)) f(layout.tensor(p).range);
    else
      for (int l = 0; l < layout.config().n_layer; ++l) f(layout.tensor(p, l).range);
  }
}
}  // namespace

bool is_llmc_model(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int32_t m = 0;
  const bool ok = std::fread(&m, 4, 1, f) == 1 && m == kLlmcModelMagic;
  std::fclose(f);
  return ok;
}

LlmcModel read_llmc_model(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail_input(path, "cannot open llm.c model file: ", std::strerror(errno));
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  int32_t h[256];
  if (std::fread(h, sizeof(h), 1, f) != 1) fail_input(path, "truncated llm.c model header");
  if (h[0] != kLlmcModelMagic)
    fail_input(path, "not an llm.c model file: magic ", h[0], ", expected ", kLlmcModelMagic);
  if (h[1] != 3 && h[1] != 1)
    fail_input(path, "llm.c model version ", h[1], " is not supported: expected 3 (fp32, padded "
               "vocabulary) or 1 (fp32)");
  LlmcModel m;
  m.config.block_size = h[2], m.config.vocab_size = h[3], m.config.n_layer = h[4];
  m.config.n_head = h[5], m.config.n_embd = h[6];
  m.config.validate();
  const int file_vp = h[1] == 3 ? h[7] : h[3];
  if (file_vp < m.config.vocab_size) fail_input(path, "padded vocabulary ", file_vp, " < vocabulary ", h[3]);
  // The file size the header implies, checked before anything is allocated for the shape it claims.
  // Counted in double (ParamLayout's count with file_vp rows of wte: wpe, 12 C^2 + 13 C per block,
  // the final LayerNorm): a corrupt header cannot overflow it, and it is exact below 2^53.
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  const double Cd = m.config.n_embd;
  const double floats = (double(file_vp) + m.config.block_size) * Cd +
                        m.config.n_layer * (12 * Cd * Cd + 13 * Cd) + 2 * Cd;
  const double want = 1024 + 4 * floats;
  if (want != double(size))
    fail_input(path, "file is ", size, " bytes, expected ",
               want < 1e15 ? std::to_string(uint64_t(want)) : std::to_string(want), " for ", m.config.describe());
  const ParamLayout layout(m.config);
  m.params.assign(layout.total(), 0.0f);
  const size_t C = m.config.n_embd, Vp = size_t(m.config.padded_vocab());
  if (layout.total() - Vp * C + size_t(file_vp) * C != size_t(floats))
    fail("read_llmc_model: the file size formula disagrees with ParamLayout");
  std::fseek(f, 1024, SEEK_SET);
  for_each_in_file_order(layout, [&](Range r) {
    size_t n = r.size();
    if (r.begin == 0) n = std::min(size_t(file_vp), Vp) * C;  // wte as stored; rows beyond stay zero
    if (std::fread(m.params.data() + r.begin, sizeof(float), n, f) != n)
      fail_input(path, "truncated llm.c model file");
    // A file padded further than we pad: its extra rows are padding, dropped like ours below.
    if (r.begin == 0 && size_t(file_vp) > Vp) std::fseek(f, long((size_t(file_vp) - Vp) * C * 4), SEEK_CUR);
  });
  // Padded rows of wte must not carry weights: they would receive logits.
  for (size_t i = size_t(m.config.vocab_size) * C; i < size_t(m.config.padded_vocab()) * C; ++i)
    m.params[i] = 0.0f;
  return m;
}

void write_llmc_model(const std::string& path, const ModelConfig& c, const std::vector<float>& params) {
  const ParamLayout layout(c);
  if (params.size() != layout.total()) fail("write_llmc_model: parameter count mismatch");
  int32_t h[256] = {};
  h[0] = kLlmcModelMagic, h[1] = 3, h[2] = c.block_size, h[3] = c.vocab_size, h[4] = c.n_layer;
  h[5] = c.n_head, h[6] = c.n_embd, h[7] = c.padded_vocab();
  AtomicFile f(path);
  f.write(h, sizeof(h));
  for_each_in_file_order(layout, [&](Range r) { f.write(params.data() + r.begin, r.size() * sizeof(float)); });
  f.commit();
}

}  // namespace gpt2
