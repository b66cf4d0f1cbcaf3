// kernel_check: every kernel of src/tensor, forward and backward, on deterministic pseudo-random fp32
// inputs of realistic small shapes (B=2, T=64, C=128, 4 heads, V=1000 padded to 1024), so that one
// backend's results can be compared with another's:
//
//   kernel_check --write FILE            the host (CPU) build writes its outputs: the reference
//   kernel_check --compare FILE [--tf32] the CUDA build compares its outputs with them
//
// --compare prints one row per output (relative L2 error ||x - ref|| / ||ref||, largest absolute
// difference, tolerance) and exits 1 if any output is over its tolerance: 1e-5 in fp32; with --tf32
// (cuBLAS TF32 tensor-core GEMMs, gemm_set_tf32(true)) 2e-3 for the outputs that go through a GEMM
// (matmul, LM head, attention), 1e-5 for the rest. The mixed-precision kernels (16-bit GEMM
// inputs, the loss writing a 16-bit gradient) are held to 1e-3 (--tol-lowp: the same rounded inputs
// on both sides, so only the fp32 accumulation order and a rare rounding at a 16-bit boundary
// differ); copies and self-consistency counts (a working copy equal to its masters rounded) exactly.
// Exit 2: bad arguments or an unreadable reference.
// --perturb REL scales this run's outputs by (1 +- REL) before comparing: a self-check that the
// comparison notices a difference of that size.
//
// The inputs come from a generator defined here (splitmix64), not from src/core, so a reference
// stays valid while the rest of the code changes; the file records a hash of the inputs and
// --compare refuses a reference made from other inputs.
//
// File format (little-endian): "GPT2KCHK", u32 version (3), u32 records, u64 input hash, u32 length
// + bytes of the writer's description; per record: u32 length + name, u8 type (0 f32, 1 f64),
// u8 tolerance class (Tol), u64 input hash when the output was taken, u64 count, the values.
//
// No device lambdas here: every kernel is called through its src/tensor function.
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/adamw_update.hpp"
#include "tensor/attention.hpp"
#include "tensor/flash_attention.hpp"
#include "tensor/convert.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/gemm.hpp"
#include "tensor/gemm_lowp.hpp"
#include "tensor/indexed_copy.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"
#include "tensor/reduce.hpp"
#include "tensor/working_copy.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

using namespace gpt2;

namespace {

// ---- shapes -----------------------------------------------------------------------------------
constexpr int kB = 2, kT = 64, kC = 128, kNH = 4, kV = 1000, kVp = 1024, kMaxT = 128;
constexpr int kN = kB * kT;
constexpr uint32_t kVersion = 3;
constexpr char kMagic[8] = {'G', 'P', 'T', '2', 'K', 'C', 'H', 'K'};

// ---- deterministic inputs -----------------------------------------------------------------------
uint64_t g_input_hash = 1469598103934665603ull;  // FNV-1a over every input generated

void hash_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) g_input_hash = (g_input_hash ^ b[i]) * 1099511628211ull;
}

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// n values uniform in [offset - scale, offset + scale), steps of 2^-24. Computed in double, where
// scale * u is exact, and rounded once: a build that contracts a * b + c into an FMA (-march with
// FMA, the host build) makes the same inputs as one that does not (the CUDA build's host code).
std::vector<float> uniform(size_t n, uint64_t seed, float scale, float offset = 0.0f) {
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + 17;
  std::vector<float> v(n);
  for (auto& x : v) {
    const double u = double(splitmix64(s) >> 40) * 0x1.0p-23 - 1.0;  // exact: 24 bits
    x = float(double(offset) + double(scale) * u);
  }
  hash_bytes(v.data(), v.size() * sizeof(float));
  return v;
}

std::vector<int> ints(size_t n, uint64_t seed, int bound) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
  std::vector<int> v(n);
  for (auto& x : v) x = int(splitmix64(s) % uint64_t(bound));
  hash_bytes(v.data(), v.size() * sizeof(int));
  return v;
}

// ---- host <-> device ----------------------------------------------------------------------------
using IntBuffer = Kokkos::View<int*, Kokkos::LayoutRight, MemSpace>;

Buffer<float> dev(const std::vector<float>& h) {
  Buffer<float> b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kernel_check"), h.size());
  Kokkos::deep_copy(b, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()));
  return b;
}
Buffer<float> zeros(size_t n) { return Buffer<float>("kernel_check_zeros", n); }
IntBuffer dev_ints(const std::vector<int>& h) {
  IntBuffer b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kernel_check_ints"), h.size());
  Kokkos::deep_copy(b, Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()));
  return b;
}
std::vector<double> host(const Buffer<float>& b) {
  std::vector<float> h(b.extent(0));
  Kokkos::deep_copy(Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()), b);
  return std::vector<double>(h.begin(), h.end());
}
Mat<float> M(const Buffer<float>& b, size_t r, size_t c) { return Mat<float>(b.data(), r, c); }
Vec<float> V(const Buffer<float>& b) { return Vec<float>(b.data(), b.extent(0)); }

// ---- outputs ------------------------------------------------------------------------------------
// Each output's tolerance class.
enum Tol : uint8_t {
  kPlain = 0,  // fp32 arithmetic: --tol
  kGemm = 1,   // through a GEMM: --tol-tf32 under --tf32, else --tol
  kLowp = 2,   // 16-bit inputs or outputs: --tol-lowp
  kExact = 3,  // copies and counts: equal
};

struct Record {
  std::string name;
  uint8_t type = 0;  // 0: fp32 values, 1: fp64 values
  uint8_t tol = kPlain;
  std::vector<double> values;
  uint64_t inputs = 0;  // the input hash when this output was taken: where two builds' inputs part
};

struct Outputs {
  std::vector<Record> records;
  void add(const std::string& name, const Buffer<float>& b, bool gemm) {
    records.push_back({name, 0, uint8_t(gemm ? kGemm : kPlain), host(b), g_input_hash});
  }
  void add_class(const std::string& name, const Buffer<float>& b, Tol tol) {
    records.push_back({name, 0, tol, host(b), g_input_hash});
  }
  void add_scalar(const std::string& name, double x, Tol tol = kPlain) {
    records.push_back({name, 1, tol, {x}, g_input_hash});
  }
};

// ---- the kernels ---------------------------------------------------------------------------------
void check_embedding(Outputs& out) {
  const std::vector<int> host_tokens = ints(kN, 1, kV);
  auto tokens = dev_ints(host_tokens);
  auto wte = dev(uniform(size_t(kVp) * kC, 2, 0.5f)), wpe = dev(uniform(size_t(kMaxT) * kC, 3, 0.5f));
  auto y = zeros(size_t(kN) * kC);
  embedding_forward<float>(M(y, kN, kC), tokens, M(wte, kVp, kC), M(wpe, kMaxT, kC), kT);
  out.add("embedding.fwd.out", y, false);
  // Backward accumulates (+=) into gradients that already hold something.
  auto dy = dev(uniform(size_t(kN) * kC, 4, 1.0f));
  auto dwte = dev(uniform(size_t(kVp) * kC, 5, 0.1f)), dwpe = dev(uniform(size_t(kMaxT) * kC, 6, 0.1f));
  TokenGroups groups;
  groups.allocate(kN);
  std::vector<int> staging(TokenGroups::table_size(kN));
  group_tokens(groups, host_tokens.data(), kN, staging.data());
  auto parts = zeros(size_t(TokenGroups::max_parts(kN)) * kC);
  embedding_backward<float>(M(dwte, kVp, kC), M(dwpe, kMaxT, kC), M(dy, kN, kC), groups, M(parts, groups.parts, kC), kT);
  out.add("embedding.bwd.dwte", dwte, false);
  out.add("embedding.bwd.dwpe", dwpe, false);
}

void check_layernorm(Outputs& out) {
  auto x = dev(uniform(size_t(kN) * kC, 10, 2.0f, 0.5f));
  auto w = dev(uniform(kC, 11, 0.1f, 1.0f)), b = dev(uniform(kC, 12, 0.1f));
  auto y = zeros(size_t(kN) * kC), mean = zeros(kN), rstd = zeros(kN);
  layernorm_forward<float>(M(y, kN, kC), V(mean), V(rstd), M(x, kN, kC), V(w), V(b));
  out.add("layernorm.fwd.out", y, false);
  out.add("layernorm.fwd.mean", mean, false);
  out.add("layernorm.fwd.rstd", rstd, false);
  auto dy = dev(uniform(size_t(kN) * kC, 13, 1.0f));
  auto dx = dev(uniform(size_t(kN) * kC, 14, 0.1f));
  auto dw = dev(uniform(kC, 15, 0.1f)), db = dev(uniform(kC, 16, 0.1f));
  layernorm_backward<float>(M(dx, kN, kC), V(dw), V(db), M(dy, kN, kC), M(x, kN, kC), V(w), V(mean), V(rstd));
  out.add("layernorm.bwd.din", dx, false);
  out.add("layernorm.bwd.dw", dw, false);
  out.add("layernorm.bwd.db", db, false);
}

// The MLP up-projection (bias + fused residual) and the LM head (no bias, tied wte).
void check_matmul(Outputs& out) {
  const int OC = 4 * kC;
  auto x = dev(uniform(size_t(kN) * kC, 20, 1.0f));
  auto w = dev(uniform(size_t(OC) * kC, 21, 0.2f)), b = dev(uniform(OC, 22, 0.1f));
  auto res = dev(uniform(size_t(kN) * OC, 23, 1.0f));
  auto y = zeros(size_t(kN) * OC);
  matmul_forward<float>(M(y, kN, OC), M(x, kN, kC), M(w, OC, kC), V(b), M(res, kN, OC));
  out.add("matmul.fwd.out", y, true);
  auto dy = dev(uniform(size_t(kN) * OC, 24, 1.0f));
  auto dx = zeros(size_t(kN) * kC);
  auto dw = dev(uniform(size_t(OC) * kC, 25, 0.1f)), db = dev(uniform(OC, 26, 0.1f));
  matmul_backward<float>(M(dx, kN, kC), M(dw, OC, kC), V(db), M(dy, kN, OC), M(x, kN, kC), M(w, OC, kC));
  out.add("matmul.bwd.din", dx, true);
  out.add("matmul.bwd.dw", dw, true);
  out.add("matmul.bwd.db", db, false);

  auto wte = dev(uniform(size_t(kVp) * kC, 27, 0.2f));
  auto logits = zeros(size_t(kN) * kVp);
  matmul_forward<float>(M(logits, kN, kVp), M(x, kN, kC), M(wte, kVp, kC), Vec<const float>());
  out.add("lm_head.fwd.logits", logits, true);
  auto dlogits = dev(uniform(size_t(kN) * kVp, 28, 0.05f));
  auto dx2 = dev(uniform(size_t(kN) * kC, 29, 0.1f));  // accumulated into (accumulate_din)
  auto dwte = dev(uniform(size_t(kVp) * kC, 30, 0.1f));
  matmul_backward<float>(M(dx2, kN, kC), M(dwte, kVp, kC), Vec<float>(), M(dlogits, kN, kVp), M(x, kN, kC),
                         M(wte, kVp, kC), true);
  out.add("lm_head.bwd.din", dx2, true);
  out.add("lm_head.bwd.dwte", dwte, true);
}

void check_attention(Outputs& out) {
  const size_t att_n = size_t(kB) * kNH * kT * kT;
  auto qkv = dev(uniform(size_t(kN) * 3 * kC, 40, 1.0f));
  auto y = zeros(size_t(kN) * kC), att = zeros(att_n);
  attention_forward<float>(M(y, kN, kC), M(att, size_t(kB) * kNH * kT, kT), M(qkv, kN, 3 * kC), kB, kT, kNH);
  out.add("attention.fwd.out", y, true);
  out.add("attention.fwd.att", att, true);
  auto dy = dev(uniform(size_t(kN) * kC, 41, 1.0f));
  auto dqkv = dev(uniform(size_t(kN) * 3 * kC, 42, 1.0f));  // overwritten
  auto datt = dev(uniform(att_n, 43, 1.0f));                  // scratch
  attention_backward<float>(M(dqkv, kN, 3 * kC), M(datt, size_t(kB) * kNH * kT, kT), M(dy, kN, kC),
                            M(qkv, kN, 3 * kC), M(att, size_t(kB) * kNH * kT, kT), kB, kT, kNH);
  out.add("attention.bwd.dqkv", dqkv, true);
}

// Fused attention (tensor/flash_attention.hpp), without and with a document mask (sequence 0 holds
// documents starting at 0 and 40, sequence 1 one): the team kernels of the host and the GPU.
void check_flash_attention(Outputs& out) {
  std::vector<int> starts(size_t(kN), 0);
  for (int t = 40; t < kT; ++t) starts[size_t(t)] = 40;
  const IntBuffer docs = dev_ints(starts);
  for (const bool masked : {false, true}) {
    const std::string name = masked ? "flash.doc." : "flash.";
    auto qkv = dev(uniform(size_t(kN) * 3 * kC, 44, 1.0f));
    auto y = zeros(size_t(kN) * kC), lse = zeros(size_t(kB) * kNH * kT), D = zeros(size_t(kB) * kNH * kT);
    const int hs = kC / kNH;
    FlashProblem<float> p{M(qkv, kN, 3 * kC), M(qkv, kN, 3 * kC), kC, 2 * kC, AttnSpan::whole(kT), AttnSpan::whole(kT),
                          masked ? DocStarts(docs) : DocStarts(), kB, kNH, hs, flash::tile_for<float>(hs, kT)};
    flash_attention_forward<float>(p, M(y, kN, kC), Vec<float>(), Vec<float>(), V(lse), FlashPass{});
    out.add(name + "fwd.out", y, true);
    out.add(name + "fwd.lse", lse, true);
    auto dy = dev(uniform(size_t(kN) * kC, 45, 1.0f));
    auto dqkv = dev(uniform(size_t(kN) * 3 * kC, 46, 1.0f));  // overwritten
    flash_attention_row_dots<float>(V(D), M(dy, kN, kC), M(y, kN, kC), kT, kNH);
    flash_attention_backward_dq<float>(p, M(dqkv, kN, 3 * kC), M(dy, kN, kC), V(lse), V(D), false);
    flash_attention_backward_dkv<float>(p, M(dqkv, kN, 3 * kC), M(dy, kN, kC), V(lse), V(D), false);
    out.add(name + "bwd.dqkv", dqkv, true);
  }
}

void check_gelu(Outputs& out) {
  const size_t n = size_t(kN) * 4 * kC;
  auto x = dev(uniform(n, 50, 4.0f));
  auto y = zeros(n);
  gelu_forward<float>(V(y), V(x));
  out.add("gelu.fwd.out", y, false);
  auto d = dev(uniform(n, 51, 1.0f));
  gelu_backward<float>(V(d), V(x));
  out.add("gelu.bwd.din", d, false);
}

void check_crossentropy(Outputs& out) {
  // Real columns [0, V) hold logits; the padded ones hold junk the kernels must ignore.
  auto h = uniform(size_t(kN) * kVp, 60, 4.0f);
  for (int n = 0; n < kN; ++n)
    for (int j = kV; j < kVp; ++j) h[size_t(n) * kVp + j] = 50.0f;
  auto targets = dev_ints(ints(kN, 61, kV));
  const float dloss = 1.0f / kN;
  auto logits = dev(h);
  auto losses = zeros(kN), lse = zeros(kN);
  crossentropy_forward<float>(V(losses), V(lse), M(logits, kN, kVp), targets, kV);
  out.add("crossentropy.fwd.losses", losses, false);
  out.add("crossentropy.fwd.lse", lse, false);
  crossentropy_backward<float>(M(logits, kN, kVp), V(lse), targets, kV, dloss);
  out.add("crossentropy.bwd.dlogits", logits, false);
  auto logits2 = dev(h);
  auto losses2 = zeros(kN);
  crossentropy_fused<float>(V(losses2), M(logits2, kN, kVp), targets, kV, dloss);
  out.add("crossentropy.fused.losses", losses2, false);
  out.add("crossentropy.fused.dlogits", logits2, false);
  // Masked rows (a negative target: a translation pair's source): loss 0 and a zero gradient row.
  std::vector<int> masked = ints(kN, 62, kV);
  for (int n = 0; n < kN; n += 3) masked[size_t(n)] = kIgnoreTarget;
  auto logits3 = dev(h);
  auto losses3 = zeros(kN);
  crossentropy_fused<float>(V(losses3), M(logits3, kN, kVp), dev_ints(masked), kV, dloss);
  out.add("crossentropy.masked.losses", losses3, false);
  out.add("crossentropy.masked.dlogits", logits3, false);
}

// Decoding with a KV cache: one sequence's rows appended as a prompt, one row, then the rest, each
// piece's keys and values stored and its queries run against the cache.
void check_cached_attention(Outputs& out) {
  const std::vector<float> hq = uniform(size_t(kT) * 3 * kC, 44, 1.0f);
  auto kv = zeros(size_t(kT) * 2 * kC), y = zeros(size_t(kT) * kC), att = zeros(size_t(kNH) * kT * kT);
  int p0 = 0;
  for (const int n : {kT / 2, 1, kT - kT / 2 - 1}) {
    auto piece = dev(std::vector<float>(hq.begin() + long(p0) * 3 * kC, hq.begin() + long(p0 + n) * 3 * kC));
    kv_cache_store<float>(M(kv, kT, 2 * kC), M(piece, n, 3 * kC), p0);
    attention_forward_cached<float>(Mat<float>(y.data() + size_t(p0) * kC, n, kC), V(att), M(piece, n, 3 * kC),
                                    M(kv, kT, 2 * kC), p0, kNH);
    p0 += n;
  }
  out.add_class("attention.cached.kv", kv, kExact);
  out.add("attention.cached.out", y, true);
}

void check_adamw(Outputs& out) {
  const size_t n = 65537;
  auto p = dev(uniform(n, 70, 1.0f)), m = zeros(n), v = zeros(n);
  AdamWStep s;
  s.lr = 1e-3, s.weight_decay = 0.1, s.grad_scale = 0.7, s.step = 1;
  auto g1 = dev(uniform(n, 71, 1.0f));
  adamw_update<float>(V(p), V(g1), V(m), V(v), s);
  auto g2 = dev(uniform(n, 72, 1.0f));
  s.step = 2, s.grad_scale = 1.0;
  adamw_update<float>(V(p), V(g2), V(m), V(v), s);
  out.add("adamw.p", p, false);
  out.add("adamw.m", m, false);
  out.add("adamw.v", v, false);
}

void check_reductions(Outputs& out) {
  const size_t n = 3 * 4096 + 123 + 1000000;  // many chunks, a partial last one
  auto g = dev(uniform(n, 80, 1.0f, 0.01f));
  out.add_scalar("sum_of_squares", sum_of_squares<float>(V(g)));
  out.add_scalar("sum_of", sum_of<float>(V(g)));
}

// The fused passes of the block's forward: bias + GELU, bias + residual + LayerNorm.
void check_fused(Outputs& out) {
  const int OC = 4 * kC;
  auto pre = dev(uniform(size_t(kN) * OC, 90, 3.0f)), b = dev(uniform(OC, 91, 0.5f));
  auto y = zeros(size_t(kN) * OC);
  bias_gelu_forward<float>(M(pre, kN, OC), V(b), M(y, kN, OC));
  out.add("bias_gelu.fwd.pre", pre, false);
  out.add("bias_gelu.fwd.out", y, false);
  auto x = dev(uniform(size_t(kN) * kC, 92, 1.0f)), bias = dev(uniform(kC, 93, 0.2f));
  auto res = dev(uniform(size_t(kN) * kC, 94, 1.0f));
  auto w = dev(uniform(kC, 95, 0.5f, 1.0f)), lb = dev(uniform(kC, 96, 0.2f));
  auto ln = zeros(size_t(kN) * kC), mean = zeros(kN), rstd = zeros(kN);
  residual_layernorm_forward<float>(M(x, kN, kC), V(bias), M(res, kN, kC), M(ln, kN, kC), V(mean), V(rstd), V(w), V(lb));
  out.add("residual_layernorm.fwd.x", x, false);
  out.add("residual_layernorm.fwd.out", ln, false);
  out.add("residual_layernorm.fwd.rstd", rstd, false);
}

// Mixed precision: rounding to bf16 / fp16, GEMMs of 16-bit inputs, the loss writing its gradient in
// 16 bits, AdamW writing the working copy, and the index copies of ZeRO's packed gathers.
Buffer<float> widen(const Buffer<uint16_t>& bits, bool fp16) {
  std::vector<uint16_t> h(bits.extent(0));
  Kokkos::deep_copy(Kokkos::View<uint16_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(h.data(), h.size()), bits);
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = fp16 ? half_bits::fp16_to_float(h[i]) : half_bits::bf16_to_float(h[i]);
  Buffer<float> b(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kernel_check_widened"), f.size());
  Kokkos::deep_copy(b, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(f.data(), f.size()));
  return b;
}
template <class H>
Buffer<uint16_t> rounded(const Buffer<float>& x) {
  Buffer<uint16_t> bits(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kernel_check_bits"), x.extent(0));
  convert<H, float>(Vec<H>(reinterpret_cast<H*>(bits.data()), x.extent(0)), Vec<const float>(x.data(), x.extent(0)));
  return bits;
}

// A 16-bit forward product with its bias and residual: inside the library's call where the build adds
// them (cuBLASLt; oneDNN for bf16), else the product and a pass after it -- the same values either way.
template <class L>
Buffer<float> forward_with_epilogue(const Buffer<uint16_t>& x, const Buffer<uint16_t>& w, const Buffer<float>& b,
                                    const Buffer<float>& res, int OC) {
  auto y = zeros(size_t(kN) * OC);
  const L *xl = reinterpret_cast<const L*>(x.data()), *wl = reinterpret_cast<const L*>(w.data());
  if (gemm_lowp_fuses_epilogue(std::is_same_v<L, bf16>)) {
    gemm_lowp_with_epilogue<L>(kN, OC, kC, xl, kC, wl, kC, y.data(), OC, GemmEpilogue{b.data(), res.data()});
  } else {
    gemm_lowp<L>(Op::N, Op::T, kN, OC, kC, 1.0f, xl, kC, wl, kC, 0.0f, y.data(), OC);
    add_bias_residual<float>(M(y, kN, OC), V(b), M(res, kN, OC));
  }
  return y;
}

void check_sixteen_bit(Outputs& out) {
  const int OC = 4 * kC;
  auto x = dev(uniform(size_t(kN) * kC, 100, 1.0f)), w = dev(uniform(size_t(OC) * kC, 101, 0.2f));
  const Buffer<uint16_t> xb = rounded<bf16>(x), wb = rounded<bf16>(w), xh = rounded<fp16>(x), wh = rounded<fp16>(w);
  out.add_class("convert.bf16", widen(xb, false), kExact);
  out.add_class("convert.fp16", widen(xh, true), kExact);
  auto y = zeros(size_t(kN) * OC), yh = zeros(size_t(kN) * OC);
  gemm_lowp<bf16>(Op::N, Op::T, kN, OC, kC, 1.0f, reinterpret_cast<const bf16*>(xb.data()), kC,
                  reinterpret_cast<const bf16*>(wb.data()), kC, 0.0f, y.data(), OC);
  gemm_lowp<fp16>(Op::N, Op::T, kN, OC, kC, 1.0f, reinterpret_cast<const fp16*>(xh.data()), kC,
                  reinterpret_cast<const fp16*>(wh.data()), kC, 0.0f, yh.data(), OC);
  out.add_class("gemm.bf16.x_wT", y, kLowp);
  out.add_class("gemm.fp16.x_wT", yh, kLowp);
  auto b = dev(uniform(OC, 108, 0.1f)), res = dev(uniform(size_t(kN) * OC, 109, 1.0f));
  out.add_class("gemm.bf16.x_wT_bias_residual", forward_with_epilogue<bf16>(xb, wb, b, res, OC), kLowp);
  out.add_class("gemm.fp16.x_wT_bias_residual", forward_with_epilogue<fp16>(xh, wh, b, res, OC), kLowp);
  auto dy = dev(uniform(size_t(kN) * OC, 102, 1.0f));
  const Buffer<uint16_t> dyb = rounded<bf16>(dy);
  auto dw = dev(uniform(size_t(OC) * kC, 103, 0.1f));  // a weight gradient accumulates
  gemm_lowp<bf16>(Op::T, Op::N, OC, kC, kN, 1.0f, reinterpret_cast<const bf16*>(dyb.data()), OC,
                  reinterpret_cast<const bf16*>(xb.data()), kC, 1.0f, dw.data(), kC);
  out.add_class("gemm.bf16.dyT_x", dw, kLowp);

  auto h = uniform(size_t(kN) * kVp, 104, 4.0f);
  auto logits = dev(h), losses = zeros(kN);
  Buffer<uint16_t> dlogits(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kernel_check_dlogits"), size_t(kN) * kVp);
  crossentropy_fused<float, bf16>(V(losses), M(logits, kN, kVp), dev_ints(ints(kN, 105, kV)), kV, 1.0f / kN,
                                  Mat<bf16>(reinterpret_cast<bf16*>(dlogits.data()), kN, kVp));
  out.add("crossentropy.fused16.losses", losses, false);
  out.add_class("crossentropy.fused16.dlogits", widen(dlogits, false), kLowp);

  // AdamW writes the copy in its pass: on any device the copy is exactly the new masters rounded.
  for (const bool fp16 : {false, true}) {
    const size_t n = 65537;
    auto p = dev(uniform(n, 106, 1.0f)), g = dev(uniform(n, 107, 1.0f)), m = zeros(n), v = zeros(n);
    Buffer<uint16_t> copy("kernel_check_copy", n);
    AdamWStep st;
    st.lr = 1e-3, st.weight_decay = 0.1, st.step = 1;
    adamw_update<float>(V(p), V(g), V(m), V(v), st,
                        WorkingCopy{Vec<uint16_t>(copy.data(), n), fp16 ? Precision::fp16 : Precision::bf16});
    const std::vector<double> masters = host(p), got = host(widen(copy, fp16));
    double mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      const float want = fp16 ? half_bits::fp16_to_float(half_bits::fp16_from_float(float(masters[i])))
                              : half_bits::bf16_to_float(half_bits::bf16_from_float(float(masters[i])));
      mismatches += double(float(got[i]) != want);
    }
    out.add(fp16 ? "adamw.fp16.p" : "adamw.bf16.p", p, false);
    out.add_scalar(fp16 ? "adamw.fp16.copy_mismatches" : "adamw.bf16.copy_mismatches", mismatches, kExact);
  }

  // ZeRO's packed gathers: values from scattered positions into one buffer and back.
  std::vector<int> at = ints(4096, 108, int(kN) * kC);
  std::vector<int> seen(size_t(kN) * kC, 0), to(at.size());
  for (size_t i = 0; i < at.size(); ++i) to[i] = seen[size_t(at[i])]++ ? -1 : at[i];  // targets distinct, -1 padding
  auto at32 = dev_ints(at), to32 = dev_ints(to);
  auto packed = zeros(at.size()), scattered = zeros(size_t(kN) * kC);
  pack_at<float>(V(packed), Vec<const float>(x.data(), x.extent(0)),
                 CVec<int32_t>(reinterpret_cast<const int32_t*>(at32.data()), at.size()));
  unpack_to<float>(V(scattered), Vec<const float>(packed.data(), at.size()),
                   CVec<int32_t>(reinterpret_cast<const int32_t*>(to32.data()), to.size()));
  out.add_class("pack_at", packed, kExact);
  out.add_class("unpack_to", scattered, kExact);
}

Outputs run_all() {
  Outputs out;
  check_embedding(out);
  check_layernorm(out);
  check_matmul(out);
  check_attention(out);
  check_flash_attention(out);
  check_cached_attention(out);
  check_gelu(out);
  check_crossentropy(out);
  check_adamw(out);
  check_reductions(out);
  check_fused(out);
  check_sixteen_bit(out);
  Kokkos::fence();
  return out;
}

// ---- file --------------------------------------------------------------------------------------
struct Reference {
  uint64_t input_hash = 0;
  std::string origin;
  std::map<std::string, Record> records;
};

template <class X>
void put(std::ofstream& f, const X& x) {
  f.write(reinterpret_cast<const char*>(&x), sizeof(X));
}
template <class X>
bool get(std::ifstream& f, X& x) {
  return bool(f.read(reinterpret_cast<char*>(&x), sizeof(X)));
}
void put_string(std::ofstream& f, const std::string& s) {
  put(f, uint32_t(s.size()));
  f.write(s.data(), std::streamsize(s.size()));
}
bool get_string(std::ifstream& f, std::string& s) {
  uint32_t n = 0;
  if (!get(f, n) || n > (1u << 20)) return false;
  s.resize(n);
  return bool(f.read(&s[0], n));
}

bool write_file(const std::string& path, const Outputs& out, const std::string& origin) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return false;
  f.write(kMagic, sizeof(kMagic));
  put(f, kVersion);
  put(f, uint32_t(out.records.size()));
  put(f, g_input_hash);
  put_string(f, origin);
  for (const Record& r : out.records) {
    put_string(f, r.name);
    put(f, r.type);
    put(f, r.tol);
    put(f, r.inputs);
    put(f, uint64_t(r.values.size()));
    for (double x : r.values) {
      if (r.type == 0)
        put(f, float(x));
      else
        put(f, x);
    }
  }
  return bool(f.flush());
}

// Returns an empty string on success, else what is wrong.
std::string read_file(const std::string& path, Reference& ref) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "cannot open " + path;
  char magic[8];
  uint32_t version = 0, count = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return path + " is not a kernel_check file";
  if (!get(f, version) || version != kVersion)
    return path + ": format version " + std::to_string(version) + ", expected " + std::to_string(kVersion);
  if (!get(f, count) || !get(f, ref.input_hash) || !get_string(f, ref.origin)) return path + ": truncated header";
  for (uint32_t i = 0; i < count; ++i) {
    Record r;
    uint64_t n = 0;
    if (!get_string(f, r.name) || !get(f, r.type) || !get(f, r.tol) || !get(f, r.inputs) || !get(f, n) ||
        n > (1ull << 32))
      return path + ": truncated record " + std::to_string(i);
    r.values.resize(n);
    for (auto& x : r.values) {
      bool ok;
      if (r.type == 0) {
        float y = 0;
        ok = get(f, y);
        x = y;
      } else {
        ok = get(f, x);
      }
      if (!ok) return path + ": truncated values of " + r.name;
    }
    ref.records[r.name] = std::move(r);
  }
  return "";
}

// ---- main ----------------------------------------------------------------------------------------
std::string describe_backend() {
  std::string s = ExecSpace::name();
#if defined(KOKKOS_ENABLE_CUDA)
  int dev = 0;
  cudaDeviceProp p;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    s += std::string(" (") + p.name + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
#endif
  return s;
}

void usage(FILE* to) {
  std::fprintf(to,
               "usage: kernel_check (--write FILE | --compare FILE) [--tf32] [--tol X] [--tol-tf32 X] [--tol-lowp X]\n"
               "                    [--perturb REL]\n"
               "  --write FILE     run every src/tensor kernel forward and backward and write the outputs\n"
               "  --compare FILE   run them and compare with FILE (relative L2 error per output)\n"
               "  --tf32           TF32 tensor-core GEMMs (gemm_set_tf32(true); CUDA only)\n"
               "  --tol X          tolerance for fp32 outputs (default 1e-5)\n"
               "  --tol-tf32 X     tolerance for outputs through a GEMM under --tf32 (default 2e-3)\n"
               "  --tol-lowp X     tolerance for the mixed-precision outputs (default 1e-3; copies: exact)\n"
               "  --perturb REL    scale this run's outputs by 1 +- REL first (checks the checker)\n"
               "exit status: 0 all within tolerance, 1 a mismatch, 2 bad arguments or reference\n");
}

int real_main(int argc, char** argv) {
  std::string write_path, compare_path;
  bool tf32 = false;
  double tol = 1e-5, tol_tf32 = 2e-3, tol_lowp = 1e-3, perturb = 0;
  bool missing = false;
  for (int i = 1; i < argc && !missing; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kernel_check: %s needs a value\n", what);
        missing = true;
        return "";
      }
      return argv[++i];
    };
    if (a == "--write") write_path = value("--write");
    else if (a == "--compare") compare_path = value("--compare");
    else if (a == "--tf32") tf32 = true;
    else if (a == "--tol") tol = std::atof(value("--tol").c_str());
    else if (a == "--tol-tf32") tol_tf32 = std::atof(value("--tol-tf32").c_str());
    else if (a == "--tol-lowp") tol_lowp = std::atof(value("--tol-lowp").c_str());
    else if (a == "--perturb") perturb = std::atof(value("--perturb").c_str());
    else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "kernel_check: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (missing) return 2;
  if (write_path.empty() == compare_path.empty()) {
    std::fprintf(stderr, "kernel_check: give exactly one of --write FILE and --compare FILE\n");
    usage(stderr);
    return 2;
  }
  Reference ref;
  if (!compare_path.empty()) {  // read first: a bad reference fails before any work
    const std::string err = read_file(compare_path, ref);
    if (!err.empty()) {
      std::fprintf(stderr, "kernel_check: %s\n", err.c_str());
      return 2;
    }
  }

  gemm_set_tf32(tf32);
  const std::string backend = describe_backend();
  const std::string origin = backend + (tf32 ? ", TF32 GEMMs" : ", fp32 GEMMs");
  std::printf("kernel_check: %s; B=%d T=%d C=%d heads=%d V=%d (padded %d)\n", origin.c_str(), kB, kT, kC, kNH,
              kV, kVp);
  Outputs out = run_all();

  if (!write_path.empty()) {
    if (!write_file(write_path, out, origin)) {
      std::fprintf(stderr, "kernel_check: cannot write %s\n", write_path.c_str());
      return 2;
    }
    size_t values = 0;
    for (const auto& r : out.records) values += r.values.size();
    std::printf("kernel_check: wrote %zu outputs (%zu values) to %s\n", out.records.size(), values,
                write_path.c_str());
    return 0;
  }

  if (ref.input_hash != g_input_hash) {
    std::fprintf(stderr,
                 "kernel_check: %s was made from other inputs (input hash %016llx, here %016llx): "
                 "write the reference with this version of kernel_check\n",
                 compare_path.c_str(), (unsigned long long)ref.input_hash, (unsigned long long)g_input_hash);
    for (const Record& r : out.records) {  // the first output whose inputs differ
      const auto it = ref.records.find(r.name);
      if (it != ref.records.end() && it->second.inputs == r.inputs) continue;
      std::fprintf(stderr, "kernel_check: the inputs first differ before output %s%s\n", r.name.c_str(),
                   it == ref.records.end() ? " (not in the reference)" : "");
      break;
    }
    return 2;
  }
  std::printf("reference: %s (%s)\n", compare_path.c_str(), ref.origin.c_str());
  std::printf("%-28s %9s %11s %12s %12s %9s  %s\n", "output", "values", "||ref||", "rel L2 err", "max |diff|",
              "tol", "result");
  int failed = 0;
  for (Record& r : out.records) {
    if (perturb != 0)
      for (size_t i = 0; i < r.values.size(); ++i) r.values[i] *= 1.0 + (i % 2 ? perturb : -perturb);
    const double t = r.tol == kExact ? 0.0 : r.tol == kLowp ? tol_lowp : tf32 && r.tol == kGemm ? tol_tf32 : tol;
    auto it = ref.records.find(r.name);
    if (it == ref.records.end() || it->second.values.size() != r.values.size()) {
      std::printf("%-28s %9zu %11s %12s %12s %9.1e  FAIL (%s)\n", r.name.c_str(), r.values.size(), "-", "-", "-", t,
                  it == ref.records.end() ? "not in the reference" : "size differs");
      ++failed;
      continue;
    }
    const auto& want = it->second.values;
    double diff2 = 0, ref2 = 0, maxabs = 0;
    bool finite = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = r.values[i] - want[i];
      if (!std::isfinite(r.values[i])) finite = false;
      diff2 += d * d;
      ref2 += want[i] * want[i];
      maxabs = std::fabs(d) > maxabs ? std::fabs(d) : maxabs;
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    const bool ok = finite && rel <= t;
    if (!ok) ++failed;
    std::printf("%-28s %9zu %11.4g %12.3e %12.3e %9.1e  %s%s\n", r.name.c_str(), r.values.size(), std::sqrt(ref2),
                rel, maxabs, t,
                ok ? "ok" : "FAIL", finite ? "" : " (non-finite values)");
  }
  for (const auto& [name, rec] : ref.records) {
    bool seen = false;
    for (const Record& r : out.records) seen = seen || r.name == name;
    if (!seen) std::printf("note: the reference has an output this version does not compute: %s\n", name.c_str());
  }
  if (failed) {
    std::printf("kernel_check: %d of %zu outputs differ from the reference beyond tolerance\n", failed,
                out.records.size());
    return 1;
  }
  std::printf("kernel_check: all %zu outputs match the reference\n", out.records.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int rc = real_main(argc, argv);
  gemm_finalize();
  Kokkos::finalize();
  return rc;
}
