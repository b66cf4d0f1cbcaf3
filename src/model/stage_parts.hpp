#pragma once
// The parts a Stage (model/stage.hpp) is made of besides the block's math, one job each: the
// tensor-, sequence- and context-parallel wiring; the scratch its passes share; recomputation; which
// kernels it runs. (The precision and the 16-bit working copies are model/linear.hpp's Linear.)
#include <functional>
#include <memory>

#include "core/error.hpp"
#include "model/activation_sizes.hpp"
#include "model/cp_ring.hpp"
#include "model/linear.hpp"
#include "model/tp_group.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

// The wiring of the tensor-parallel group and the context-parallel ring (one-rank stand-ins where
// none were given): each local row's position in its sequence, and the regions between the groups'
// collectives -- the full rows gathered under sequence parallelism (and their 16-bit copy), the
// partial sums before a reduction, the ring's K/V blocks and running sum. T: the rank's tokens of a
// sequence; C: channels.
template <class T>
struct StageParallel {
  std::unique_ptr<SingleTp<T>> single_tp;
  TpGroup<T>* tp = nullptr;
  std::unique_ptr<SingleCp<T>> single_cp;
  CpRing<T>* cp = nullptr;
  bool sp = false;  // LayerNorms and residuals on N / tp rows
  Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> positions;  // a local row's position in its sequence
  Buffer<T> full, partial;
  Buffer<uint16_t> full16;
  Buffer<T> ring_kv[2], ring_dkv[2], ring_l;
  int seq = 0, C = 0;

  // Rows of the residual stream this rank holds for a microbatch of B sequences: B*T, or B*T / tp.
  int stream_rows(int B) const { return sp ? B * seq / tp->size() : B * seq; }
  Mat<T> full_scratch(int B) const { return Mat<T>(full.data(), size_t(B) * seq, C); }
  Mat<T> partial_scratch(int B) const { return Mat<T>(partial.data(), size_t(B) * seq, C); }
  bool adds_once() const { return tp->rank() == 0; }  // the rank that adds biases / wpe
  // The full (N,C) rows of a stream tensor: gathered under sequence parallelism, else x itself.
  CMat<T> gather(CMat<T> x, int B) {
    if (!sp) return x;
    Mat<T> f = full_scratch(B);
    tp->all_gather(x.data(), f.data(), x.size());
    return f;
  }
  GemmInput<T> gather_input(const GemmInput<T>& x, int B) {  // the same for a GEMM's saved input
    if (!sp) return x;
    if (!x.is_low()) return gather(x.full, B);
    // 16-bit rows travel as pairs of T (the bits are copied, not converted).
    const size_t n = x.size();
    if (n % 2 != 0 || sizeof(T) != 2 * sizeof(uint16_t)) fail("Stage: 16-bit rows of an odd size cannot be gathered");
    tp->all_gather(reinterpret_cast<const T*>(x.low.data()), reinterpret_cast<T*>(full16.data()), n / 2);
    return GemmInput<T>::low_bits(full16.data(), size_t(B) * seq, x.cols());
  }
  // out (stream rows) = the sum over tp of the partial (N,C) results in `partial` (a reduce-scatter,
  // or an all-reduce in place).
  void reduce_into(Mat<T> out, Mat<T> part) {
    if (sp) tp->reduce_scatter_sum(part.data(), out.data(), out.size());
    else tp->all_reduce_sum(part.data(), part.size());  // part is out
  }
};

// Scratch the stage's passes share across microbatches, sized for max_batch sequences: the gradients
// flowing down a block (dres at the stream, dln, dqkv, datt, dfch, datty inside it), the head's values
// (lnf, logits, lse, the tp loss's sums ce, lnf16 under mixed precision), the embedding's wte
// gradient parts, fused attention's row dots.
template <class T>
struct StageScratch {
  int max_batch = 0;
  Buffer<T> dres, dln, dqkv, datt, dfch, datty;
  Buffer<T> lnf, logits, lse, ce;
  Buffer<uint16_t> lnf16;
  Buffer<T> wte_parts;  // first stage: the wte gradient's partial sums (embedding_backward)
  Buffer<T> flash_d;    // fused: the backward's row dots (the ring's running max)
};

// Activation recomputation (train.recompute): which blocks, the memory recomputed blocks share (one
// set of the tensors they drop), and the optional bounds of each recomputation (for the trace).
template <class T>
struct Recomputation {
  Recompute mode = Recompute::none;
  int every = 1;
  std::function<void(int unit, bool begin)> on;
  Buffer<T> mem;
  Buffer<uint16_t> mem16;
  bool covers(int layer) const { return is_recomputed(mode, every, layer); }
  size_t bytes() const { return mem.extent(0) * sizeof(T) + mem16.extent(0) * 2; }
};

// Which kernels the stage runs: attention fused (tensor/flash_attention.hpp) or materialised, and
// within documents; the head's logits this many rows at a time (0: automatic).
struct StageKernels {
  bool fused_attention = false;
  bool document_masks = false;
  int loss_rows = 0;
};

}  // namespace gpt2
