#include "model/activation_sizes.hpp"

#include <algorithm>

#include <Kokkos_Macros.hpp>

#include "tensor/token_groups.hpp"

namespace gpt2 {

int recomputed_blocks(Recompute r, int every, int first, int end) {
  int n = 0;
  for (int l = first; l < end; ++l) n += is_recomputed(r, every, l);
  return n;
}

// The loss kernels give a row a team: a GPU needs thousands of rows a launch to keep its memory busy
// (333 rows of GPT-2's vocabulary ran at 11% of an H200's copy bandwidth, 2026-11-28), and has the
// memory for them.
size_t loss_chunk_values() {
#if defined(KOKKOS_ENABLE_CUDA)
  return size_t(1) << 26;
#else
  return size_t(1) << 24;
#endif
}

size_t loss_chunk_rows(int requested, size_t N, size_t local_vocab) {
  const size_t rows = requested > 0 ? size_t(requested) : loss_chunk_values() / std::max<size_t>(1, local_vocab);
  return std::max<size_t>(1, std::min(rows, N));
}

ActivationSizes activation_sizes(const ActivationShape& s) {
  const size_t tp = size_t(s.tp), T = size_t(s.seq_len), N = size_t(s.B) * T, C = size_t(s.n_embd);
  // Stream tensors (input, ln1, res2, ln2, res3 and the statistics) have R rows; the tensor-parallel
  // region's (qkv, att, atty, fch) all N rows and 1/tp of the columns.
  const size_t R = s.sequence_parallel ? N / tp : N;
  // Attention's saved tensor: the probabilities (B, nh, T, T); fused (and under context parallelism,
  // always) the log-sum-exp of each row and head (B, nh, T), from which the backward recomputes them
  // (and, with 16-bit GEMM inputs, its output y in fp32 too: the backward's row dots need it).
  const size_t heads = size_t(s.B) * size_t(s.n_head) / tp;
  const bool fused = s.fused_attention || s.cp > 1;
  const size_t att = pad_values(fused ? heads * T + (s.mixed ? N * C / tp : 0) : heads * T * T);
  // The GEMMs' inputs: ln1, atty, ln2, fch_gelu (16-bit under mixed precision).
  const size_t gemm_inputs = pad_values(R * C) * 2 + pad_values(N * C / tp) + pad_values(N * 4 * C / tp);
  const size_t res3 = pad_values(R * C);
  // Everything of a block but its output (res3): res2, qkv, att, fch, the four statistics, and the
  // GEMM inputs unless they are 16-bit.
  const size_t inner = pad_values(R * C) + pad_values(N * 3 * C / tp) + att + pad_values(N * 4 * C / tp) +
                       pad_values(R) * 4 + (s.mixed ? 0 : gemm_inputs);
  const size_t split = s.split ? pad_values(R * C) * 4 + pad_values(N * 4 * C / tp) + pad_values(N * 3 * C / tp) : 0;
  const size_t recomputed = size_t(recomputed_blocks(s.recompute, s.recompute_every, s.first_block, s.first_block + s.blocks));
  const size_t kept = size_t(s.blocks) - recomputed;
  const bool full = s.recompute == Recompute::full && recomputed > 0;
  const bool selective = s.recompute == Recompute::selective && recomputed > 0;
  const size_t head = s.last ? pad_values(R) * 2 + pad_values(R * C) : 0;
  const size_t embed = s.split && s.first ? pad_values(R * C) : 0;
  ActivationSizes out;
  out.values = pad_values(R * C) + kept * (res3 + inner + split) + head + embed;
  // full under a split backward keeps the weight pass's inputs and drops q, k, v, attention and fc.
  const size_t dropped_split = pad_values(N * 3 * C / tp) + att + pad_values(N * 4 * C / tp);
  if (s.recompute == Recompute::full) out.values += recomputed * (res3 + split + (s.split ? inner - dropped_split : 0));
  if (s.recompute == Recompute::selective) out.values += recomputed * (res3 + inner - att + split);
  out.values16 = s.mixed ? (full && !s.split ? kept : size_t(s.blocks)) * gemm_inputs : 0;
  // Scratch: dres, dln, dqkv, datt, dfch, datty; tensor parallelism's partial sums; sequence
  // parallelism's gathered stream; the wte gradient's partial sums; the head's lnf, logits, lse and
  // (tp > 1) cross-entropy sums; what recomputed blocks share (full: a block but its output;
  // selective: attention's probabilities).
  // Attention's backward scratch: its probabilities' gradient (B, nh, T, T), or fused the row dots
  // per row and head; under context parallelism also the ring's two K/V blocks and their two gradient
  // blocks (N, 2C/tp each) and the running sum per row and head (the row dots hold the running max).
  const size_t attention_scratch = !fused ? heads * T * T : heads * T + (s.cp > 1 ? 4 * N * 2 * C / tp + heads * T : 0);
  out.scratch = N * C * 2 + N * 3 * C / tp + attention_scratch + N * 4 * C / tp + N * C / tp;
  if (tp > 1) out.scratch += N * C;
  if (s.sequence_parallel) out.scratch += N * C;
  if (s.first) out.scratch += size_t(TokenGroups::max_parts(int(N))) * C;
  if (s.last) out.scratch += N * C + loss_chunk_rows(s.loss_rows, N, size_t(s.local_vocab)) * size_t(s.local_vocab) + N +
                             (tp > 1 ? 3 * N : 0);
  if (full) out.scratch += inner;
  if (selective) out.scratch += att;
  if (s.mixed) out.scratch16 = (s.sequence_parallel ? N * C : 0) + (s.last ? N * C : 0) + (full ? gemm_inputs : 0);
  return out;
}

}  // namespace gpt2
