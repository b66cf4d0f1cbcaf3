// The memory traffic of a transformer block, as its kernels and GEMMs declare it (tensor/traffic.hpp,
// the trace's /meta bytes_moved_per_step), held to a formula written from the block's operations:
// what a GPU pays in bytes for the fused path, seen by the CPU suite. One more pass over an
// activation, or one fused pass split again, changes the count.
#include <cstdio>
#include <thread>

#include "model/stage.hpp"
#include "tensor/flash_attention.hpp"
#include "tensor/traffic.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
constexpr int kB = 2, kT = 128, kC = 32, kHeads = 2;

struct PassBytes {
  uint64_t forward = 0, backward = 0;
};

// A stage of `layers` blocks (fused attention, fp32): the bytes of one training forward and of its
// backward.
PassBytes stage_traffic(int layers) {
  ModelConfig cfg;
  cfg.n_layer = layers, cfg.n_head = kHeads, cfg.n_embd = kC, cfg.vocab_size = 64, cfg.block_size = kT;
  const ParamLayout layout(cfg);
  StageOptions<float> o;
  o.fused_attention = true;
  Stage<float> st(StageLayout(layout, 0, layers), kB, kT, o);
  st.init_params(3);
  Activations<float> a = st.make_activations(kB);
  std::vector<int> tokens(size_t(kB) * kT), targets(tokens.size());
  Rng r(5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(r.below(64)), targets[i] = int(r.below(64));
  a.load(tokens.data(), targets.data());
  Buffer<float> losses("losses", size_t(kB) * kT);
  st.zero_grads();
  const Traffic t0 = traffic();
  st.forward(a, Vec<float>(losses.data(), losses.size()), true, 1.0f / float(kB * kT));
  const Traffic t1 = traffic();
  st.backward(a);
  const Traffic t2 = traffic();
  return {(t1 - t0).total(), (t2 - t1).total()};
}

// A GEMM out (M,N) = A (M,K) B (K,N): both operands read, the output written (and read when added to).
uint64_t gemm(uint64_t M, uint64_t N, uint64_t K, bool accumulate = false) {
  return (M + N) * K + M * N * (accumulate ? 2 : 1);
}

// The formula, in fp32 elements: N rows of C channels, nh heads, causal flash tiles of t rows (each
// query tile reads the key and value rows of the tiles at or before it, and each key tile the
// query rows and output gradients of the tiles at or after it: `met` rows a sequence and head).
PassBytes block_formula() {
  const uint64_t N = kB * kT, C = kC, B = kB, nh = kHeads;
  const int t = flash::tile_for<float>(kC / kHeads, kT);
  const uint64_t q = kT / t, met = q * (q + 1) / 2 * t, stats = B * nh * kT;  // (lse, D: a value a row and head)
  const uint64_t ln_forward = (N * C + 2 * C) + (N * C + 2 * N);
  // A product's bias (and residual): read by the GEMM where the library adds them, else a pass of
  // its own (the output read and written).
  const bool in_gemm = gemm_fuses_epilogue();
  auto bias_add = [&](uint64_t OC, bool residual) {
    const uint64_t r = residual ? N * OC : 0;
    return in_gemm ? OC + r : (N * OC + OC + r) + N * OC;
  };
  const uint64_t forward = ln_forward                                               // LayerNorm 1
                           + gemm(N, 3 * C, C) + bias_add(3 * C, false)             // qkv
                           + (N * C + 2 * B * met * C) + (N * C + stats)              // flash attention
                           + gemm(N, C, C)                                          // projection, then
                           + (in_gemm ? bias_add(C, true) + ln_forward              //   LayerNorm 2
                                      : (2 * N * C + 3 * C) + (2 * N * C + 2 * N))  //   (one pass of all three)
                           + gemm(N, 4 * C, C) + 4 * C + 8 * N * C                  // fc; bias + GELU
                           + (in_gemm ? 0 : 4 * N * C)                              //   (pre written back)
                           + gemm(N, C, 4 * C) + bias_add(C, true);                 // fcproj
  const uint64_t ln_backward = (3 * N * C + C + 2 * N) + N * C                  // input gradient
                               + (2 * N * C + 2 * N + 2 * C) + 2 * C;           // weight and bias sums, one pass
  auto weight = [&](uint64_t OC, uint64_t IC) { return gemm(OC, IC, N, true); };
  auto bias = [&](uint64_t OC) { return (N * OC + OC) + OC; };
  const uint64_t backward = gemm(N, 4 * C, C) + weight(C, 4 * C) + bias(C)     // fcproj
                            + (8 * N * C + 4 * C) + (4 * N * C + 4 * C)         // GELU + fc bias, one pass
                            + gemm(N, C, 4 * C) + weight(4 * C, C)              // fc
                            + ln_backward                                       // LayerNorm 2
                            + gemm(N, C, C) + weight(C, C) + bias(C)            // projection
                            + 2 * N * C + stats                                 // flash: row dots
                            + (2 * N * C + 2 * B * met * C + 2 * stats) + N * C  // query pass
                            + (2 * N * C + 2 * B * met * C + 2 * B * nh * met) + 2 * N * C  // key pass
                            + gemm(N, C, 3 * C) + weight(3 * C, C) + bias(3 * C)  // qkv
                            + ln_backward;                                      // LayerNorm 1
  return {forward * sizeof(float), backward * sizeof(float)};
}
}  // namespace

// A block's bytes: the difference of a 4-block and a 2-block stage, over 2 (the embedding and the
// head cancel), equal to the formula's -- at two query tiles a sequence, so the tiles' re-reads count.
TEST(Traffic, ABlocksPassesMoveWhatTheFormulaSays) {
  ASSERT_GE(kT / flash::tile_for<float>(kC / kHeads, kT), 2) << "the sequence should span several tiles";
  const PassBytes two = stage_traffic(2), four = stage_traffic(4), want = block_formula();
  const uint64_t forward = (four.forward - two.forward) / 2, backward = (four.backward - two.backward) / 2;
  std::printf("a block (N %d, C %d): forward %.3f MB, backward %.3f MB (the formula: %.3f, %.3f)\n", kB * kT, kC,
              forward / 1e6, backward / 1e6, want.forward / 1e6, want.backward / 1e6);
  EXPECT_EQ(forward, want.forward);
  EXPECT_EQ(backward, want.backward);
}

// The counter is the calling thread's: another thread's kernels (a background checkpoint) do not
// count in a step's.
TEST(Traffic, CountsPerThread) {
  const Traffic before = traffic();
  count_traffic(10, 20);
  std::thread([] { count_traffic(1000, 1000); }).join();
  const Traffic d = traffic() - before;
  EXPECT_EQ(d.read, 10u);
  EXPECT_EQ(d.written, 20u);
}
