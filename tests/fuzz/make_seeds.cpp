// Writes the valid (and a few invalid) seeds of the binary fuzz targets with our own writers:
//   build-fuzz/bin/fuzz_seeds tests/fuzz/corpus
// fills corpus/shard/, corpus/checkpoint/ and corpus/llmc/ (the committed seeds came from it; the
// text targets' seeds, corpus/config/ and corpus/tokenizer/, are written by hand). Models are
// 1 layer, 1 channel, so that every seed stays a few KiB.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/fs.hpp"
#include "data/token_shard.hpp"
#include "formats/checkpoint.hpp"
#include "formats/llmc_io.hpp"
#include "model/param_layout.hpp"

using namespace gpt2;

namespace {
std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void put(const std::string& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
  std::printf("%8zu  %s\n", bytes.size(), p.c_str());
}
template <class T>
void poke(std::string& s, size_t at, T v) {
  std::memcpy(&s[at], &v, sizeof v);
}
std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(int(i % 17) - 8);
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* t : {"shard", "checkpoint", "llmc"}) make_dirs(dir + "/" + t, t);

  // ---- token shards ----
  const std::string s = dir + "/shard/";
  write_shard(s + "valid_empty.bin", {});
  write_shard(s + "valid_bytes.bin", {72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 10, 0, 255});
  write_shard(s + "valid_gpt2.bin", {15496, 11, 995, 0, 50256, 198, 464, 2068, 7586, 21831, 50255, 256});
  {
    std::string v = slurp(s + "valid_bytes.bin");
    put(s + "bad_truncated.bin", v.substr(0, v.size() - 3));
    put(s + "bad_header_only.bin", v.substr(0, 600));
    std::string m = v;
    poke<int32_t>(m, 0, 20240326);  // an llm.c model's magic
    put(s + "bad_magic.bin", m);
    std::string ver = v;
    poke<int32_t>(ver, 4, 2);
    put(s + "bad_version.bin", ver);
    std::string neg = v;
    poke<int32_t>(neg, 8, -15);
    put(s + "bad_negative_count.bin", neg);
    std::string big = v;
    poke<int32_t>(big, 8, 0x7fffffff);
    put(s + "bad_huge_count.bin", big);
  }
  write_shard(s + "bad_token_65535.bin", {1, 2, 3, 65535});

  // ---- our checkpoints ----
  ModelConfig mc;
  mc.n_layer = 1, mc.n_head = 1, mc.n_embd = 1, mc.vocab_size = 3, mc.block_size = 2;
  const size_t n = ParamLayout(mc).total();
  const std::string c = dir + "/checkpoint/";
  {
    CheckpointMeta meta;
    meta.model = mc;
    meta.step = 7;
    meta.rng = {1, 2, 3, 4};
    meta.config_toml = "[model]\nn_layer = 1\nn_embd = 1\n";
    meta.optimizer = "adamw";
    CheckpointWriter w(c + "valid_adamw.bin", meta, n, {"params", "opt.m", "opt.v"});
    w.append(ramp(n, 0.5f).data(), n);
    const std::vector<float> m = ramp(n, 0.01f);
    w.append(m.data(), n / 2);  // in pieces, as the trainer writes
    w.append(m.data() + n / 2, n - n / 2);
    w.append(ramp(n, 0.001f).data(), n);
    w.commit();
  }
  {
    CheckpointMeta meta;
    meta.model = mc;
    CheckpointWriter w(c + "valid_weights_only.bin", meta, n, {"params"});
    w.append(ramp(n, 0.25f).data(), n);
    w.commit();
  }
  {
    const std::string v = slurp(c + "valid_weights_only.bin");
    put(c + "bad_truncated.bin", v.substr(0, v.size() - 5));
    std::string flip = v;
    flip[v.size() - 2] ^= 0x10;
    put(c + "bad_checksum.bin", flip);
    std::string ver = v;
    poke<uint32_t>(ver, 8, 2);
    put(c + "bad_version.bin", ver);
    std::string far = v;  // first section's offset far past the end
    poke<uint64_t>(far, 16 + 24, uint64_t(1) << 40);
    put(c + "bad_offset.bin", far);
    put(c + "bad_magic.bin", "GPT2KCKQ" + v.substr(8, 64));
    // Regression: a section whose offset + bytes wraps around 2^64 passed the size check, and
    // the reader then allocated 1 TiB for it.
    std::string wrap = v;
    poke<uint64_t>(wrap, 16 + 2 * 48 + 24, uint64_t(0) - (uint64_t(1) << 40));  // "config": offset
    poke<uint64_t>(wrap, 16 + 2 * 48 + 32, uint64_t(1) << 40);                   // and bytes
    put(c + "regress_section_wraps.bin", wrap);
  }

  // ---- llm.c model files ----
  const std::string l = dir + "/llmc/";
  write_llmc_model(l + "valid_v3.bin", mc, ramp(n, 0.125f));
  {
    // Version 1: the same, with the vocabulary unpadded (V rows of wte, not Vp).
    const std::string v3 = slurp(l + "valid_v3.bin");
    const size_t C = size_t(mc.n_embd), V = size_t(mc.vocab_size), Vp = size_t(mc.padded_vocab());
    std::string v1 = v3.substr(0, 1024) + v3.substr(1024, V * C * 4) + v3.substr(1024 + Vp * C * 4);
    poke<int32_t>(v1, 4, 1);
    poke<int32_t>(v1, 28, 0);
    put(l + "valid_v1.bin", v1);
    put(l + "bad_truncated.bin", v3.substr(0, v3.size() - 4));
    std::string ver = v3;
    poke<int32_t>(ver, 4, 2);
    put(l + "bad_version.bin", ver);
    std::string vp = v3;
    poke<int32_t>(vp, 28, 2);  // padded vocabulary below the vocabulary
    put(l + "bad_padded_vocab.bin", vp);
    std::string heads = v3;
    poke<int32_t>(heads, 20, 0);  // n_head 0
    put(l + "bad_heads.bin", heads);
    put(l + "bad_header_only.bin", v3.substr(0, 1024));
    // Regression: a header claiming a huge shape made the reader allocate its parameters before
    // comparing the file size with the shape (n_layer 2^20, n_embd 2^14: 3.4e15 floats).
    std::string huge = v3;
    poke<int32_t>(huge, 16, 1 << 20);  // n_layer
    poke<int32_t>(huge, 20, 1);        // n_head
    poke<int32_t>(huge, 24, 1 << 14);  // n_embd
    put(l + "regress_huge_shape.bin", huge);
    // A file padded further than we pad (Vp 256 for V 3; we pad to 128): valid, the extra rows are
    // dropped. Regression: they were read into our wte and past it, here past the end of all 157
    // parameters (a heap overflow).
    std::string over = v3.substr(0, 1024) + v3.substr(1024, Vp * C * 4) + std::string(128 * C * 4, '\0') +
                       v3.substr(1024 + Vp * C * 4);
    poke<int32_t>(over, 28, 256);
    put(l + "valid_v3_overpadded.bin", over);
  }
  return 0;
}
