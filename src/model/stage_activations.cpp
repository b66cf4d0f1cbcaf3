// Stage: a microbatch's activations -- their shape (model/activation_sizes.hpp sizes them) and their
// slices, each block's and the ends', out of one allocation (and one of 16-bit values under mixed
// precision), what recomputed blocks drop taken from the stage's shared scratch instead.
#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "model/stage.hpp"

namespace gpt2 {

template <class T>
ActivationShape Stage<T>::activation_shape(int B, bool split) const {
  const ModelConfig& c = config();
  ActivationShape s;
  s.B = B, s.seq_len = par_.seq, s.n_embd = c.n_embd, s.n_head = c.n_head;
  s.tp = par_.tp->size(), s.cp = par_.cp->size();
  s.fused_attention = fused();
  s.blocks = end_ - first_;
  s.first = has_embedding(), s.last = has_head();
  s.sequence_parallel = par_.sp, s.split = split, s.mixed = lin_.mixed();
  s.local_vocab = layout_.local_vocab(), s.loss_rows = k_.loss_rows;
  s.first_block = first_, s.recompute = rc_.mode, s.recompute_every = rc_.every;
  return s;
}

namespace {
// Hands out an Activations' slices in order: of its memory (and, for GEMM inputs under mixed
// precision, of its 16-bit memory), and of the stage's memory that recomputed blocks share.
template <class T>
struct Slicer {
  T* mem;
  uint16_t* mem16;
  T* shared;
  uint16_t* shared16;
  bool mixed;
  size_t off = 0, off16 = 0, shared_off = 0, shared_off16 = 0;

  T* take(size_t n) {
    T* p = mem + off;
    off += pad_values(n);
    return p;
  }
  Mat<T> m(size_t rows, size_t cols) { return Mat<T>(take(rows * cols), rows, cols); }
  GemmInput<T> g(size_t rows, size_t cols) {  // a GEMM input
    if (!mixed) return GemmInput<T>(m(rows, cols));
    uint16_t* p = mem16 + off16;
    off16 += pad_values(rows * cols);
    return GemmInput<T>::low_bits(p, rows, cols);
  }
  T* take_shared(size_t n) {
    T* p = shared + shared_off;
    shared_off += pad_values(n);
    return p;
  }
  Mat<T> ms(size_t rows, size_t cols) { return Mat<T>(take_shared(rows * cols), rows, cols); }
  GemmInput<T> gs(size_t rows, size_t cols) {
    if (!mixed) return GemmInput<T>(ms(rows, cols));
    uint16_t* p = shared16 + shared_off16;
    shared_off16 += pad_values(rows * cols);
    return GemmInput<T>::low_bits(p, rows, cols);
  }
};

// A block's activation sizes: tokens N, stream rows R, channels C, tp ranks, and attention's
// slice (att values as att_rows x att_cols).
struct BlockDims {
  size_t N, R, C, tp, att, att_rows, att_cols;
};

// One block's slices. full: everything but the output shared; under a split backward the weight
// pass's inputs (ln1, atty, res2, ln2, fch_gelu, the statistics) stay in the slot and only q, k, v,
// attention and fc are shared (recomputed once, in the input pass). selective: attention shared.
template <class T>
void slice_block(Slicer<T>& sl, typename Activations<T>::Block& s, const BlockDims& d, bool full, bool selective,
                 bool split) {
  const size_t N = d.N, R = d.R, C = d.C, tp = d.tp;
  const bool whole = full && !split;
  sl.shared_off = sl.shared_off16 = 0;
  auto mm = [&](size_t rows, size_t cols) { return whole ? sl.ms(rows, cols) : sl.m(rows, cols); };
  auto gg = [&](size_t rows, size_t cols) { return whole ? sl.gs(rows, cols) : sl.g(rows, cols); };
  auto vv = [&]() { return whole ? Vec<T>(sl.take_shared(R), R) : Vec<T>(sl.take(R), R); };
  auto dropped = [&](size_t rows, size_t cols) { return full ? sl.ms(rows, cols) : sl.m(rows, cols); };
  s.ln1 = gg(R, C);
  s.qkv = dropped(N, 3 * C / tp);
  s.att = Mat<T>(full || selective ? sl.take_shared(d.att) : sl.take(d.att), d.att_rows, d.att_cols);
  s.atty = gg(N, C / tp);
  s.res2 = mm(R, C);
  s.ln2 = gg(R, C);
  s.fch = dropped(N, 4 * C / tp);
  s.fch_gelu = gg(N, 4 * C / tp);
  s.res3 = sl.m(R, C);
  s.ln1_mean = vv();
  s.ln1_rstd = vv();
  s.ln2_mean = vv();
  s.ln2_rstd = vv();
  if (split) {
    s.d3 = sl.m(R, C), s.d2 = sl.m(R, C), s.dln2 = sl.m(R, C), s.dln1 = sl.m(R, C);
    s.dfch = sl.m(N, 4 * C / tp), s.dqkv = sl.m(N, 3 * C / tp);
  }
}
}  // namespace

template <class T>
Activations<T> Stage<T>::make_activations(int B, bool split) const {
  return allocate_activations(activation_shape(B, split));
}

template <class T>
ActivationShape Stage<T>::decoding_shape(int rows) const {
  ActivationShape s = activation_shape(1, false);
  s.seq_len = rows;
  s.blocks = 1;  // (every block's slices are the first's: a block reads only its input)
  s.recompute = Recompute::none;
  s.fused_attention = true;  // (cached attention keeps no probabilities: its scores are the caller's)
  return s;
}

template <class T>
Activations<T> Stage<T>::make_decoding(int max_rows, int max_len, Vec<T> kv, Vec<T> scores) const {
  const size_t C = size_t(config().n_embd), L = size_t(max_len), blocks = size_t(end_ - first_);
  if (kv.extent(0) < blocks * L * 2 * C || scores.extent(0) < size_t(config().n_head) * size_t(max_rows) * L)
    fail("Stage::make_decoding: the cache or the scores are smaller than ", max_len, " positions need");
  Activations<T> a = allocate_activations(decoding_shape(max_rows));
  a.doc_positions = decltype(a.doc_positions)("decode_positions", size_t(max_rows));
  for (size_t b = 0; b < blocks; ++b) a.decoding.kv.push_back(Mat<T>(kv.data() + b * L * 2 * C, L, 2 * C));
  a.decoding.scores = scores;
  return a;
}

template <class T>
Activations<T> Stage<T>::allocate_activations(const ActivationShape& shape) const {
  const size_t N = size_t(shape.B) * size_t(shape.seq_len);
  const ActivationSizes sizes = activation_sizes(shape);
  Activations<T> a;
  a.mem = uninitialized<T>("activations", sizes.values);
  if (lin_.mixed()) a.mem16 = uninitialized<uint16_t>("activations16", sizes.values16);
  a.tokens = decltype(a.tokens)("tokens", N);
  a.targets = decltype(a.targets)("targets", N);
  if (has_embedding()) a.groups.allocate(int(N));
  if (k_.document_masks) a.doc_starts = decltype(a.doc_starts)("doc_starts", N);
  if (k_.document_masks && has_embedding()) {
    a.doc_positions = decltype(a.doc_positions)("doc_positions", N);
    a.position_groups.allocate(int(N));
  }
  const std::pair<size_t, size_t> taken = slice_activations(a, shape);
  if (taken.first != sizes.values || taken.second != sizes.values16)
    fail("Stage::make_activations: the slices take ", taken.first, " + ", taken.second, " values, the size table says ",
         sizes.values, " + ", sizes.values16, " (model/activation_sizes)");
  return a;
}

template <class T>
std::pair<size_t, size_t> Stage<T>::slice_activations(Activations<T>& a, const ActivationShape& shape) const {
  const ModelConfig& c = config();
  const int B = shape.B;
  const size_t Tn = size_t(shape.seq_len), tp = size_t(par_.tp->size()), N = size_t(B) * Tn, C = c.n_embd;
  const size_t R = par_.sp ? N / tp : N;
  // attention's probabilities (B*nh, T, T), or when fused its log-sum-exp (B*nh*T, 1) (with 16-bit
  // GEMM inputs, followed by attention's output y in fp32: the fused backward's row dots read it)
  const bool fused_att = shape.fused_attention || shape.cp > 1;
  const size_t att_cols = fused_att ? 1 : Tn;
  const bool mixed = lin_.mixed(), split = shape.split, shared = shape.blocks < end_ - first_;
  const size_t att = size_t(B) * c.n_head / tp * Tn * att_cols + (fused_att && mixed ? N * C / tp : 0);
  a.B = B;
  a.seq_len = int(Tn);
  // (Recomputed blocks' dropped tensors: views of the stage's shared memory, the same for each.)
  Slicer<T> sl{a.mem.data(), a.mem16.data(), rc_.mem.data(), rc_.mem16.data(), mixed};
  a.input = sl.m(R, C);
  const BlockDims dims{N, R, C, tp, att, size_t(B) * c.n_head / tp * Tn, att_cols};
  const size_t block_at = sl.off, block_at16 = sl.off16;
  size_t end = 0, end16 = 0;
  a.blocks.resize(size_t(end_ - first_));
  for (int i = 0; i < end_ - first_; ++i) {
    const bool rec = shape.recompute != Recompute::none && recomputed(first_ + i);
    if (shared) sl.off = block_at, sl.off16 = block_at16;
    slice_block(sl, a.blocks[size_t(i)], dims, rec && rc_.mode == Recompute::full,
                rec && rc_.mode == Recompute::selective, split);
    end = std::max(end, sl.off), end16 = std::max(end16, sl.off16);
    if (sl.shared_off > rc_.mem.extent(0) || sl.shared_off16 > rc_.mem16.extent(0))
      fail("Stage::make_activations: a recomputed block takes ", sl.shared_off, " + ", sl.shared_off16,
           " values of the stage's ", rc_.mem.extent(0), " + ", rc_.mem16.extent(0));
  }
  sl.off = end, sl.off16 = end16;
  if (has_head()) {
    a.lnf_mean = Vec<T>(sl.take(R), R);
    a.lnf_rstd = Vec<T>(sl.take(R), R);
    a.dlnf = sl.m(R, C);
  }
  if (split && has_embedding()) a.dembed = sl.m(R, C);
  if (sl.off > a.mem.extent(0) || sl.off16 > a.mem16.extent(0))
    fail("Stage: activations of ", N, " rows do not fit their memory (", sl.off, " of ", a.mem.extent(0), " values)");
  return {sl.off, sl.off16};
}

#define GPT2_STAGE_ACTIVATIONS(T)                                               \
  template ActivationShape Stage<T>::activation_shape(int, bool) const; \
  template Activations<T> Stage<T>::make_activations(int, bool) const;                 \
  template ActivationShape Stage<T>::decoding_shape(int) const;                        \
  template Activations<T> Stage<T>::make_decoding(int, int, Vec<T>, Vec<T>) const;     \
  template Activations<T> Stage<T>::allocate_activations(const ActivationShape&) const; \
  template std::pair<size_t, size_t> Stage<T>::slice_activations(Activations<T>&, const ActivationShape&) const;
GPT2_STAGE_ACTIVATIONS(float)
GPT2_STAGE_ACTIVATIONS(double)
#undef GPT2_STAGE_ACTIVATIONS

}  // namespace gpt2
