// Stage: attention's variants -- the dispatch between whole-sequence and ring attention (context
// parallelism: the K/V blocks go round the cp ring), and the recomputations train.recompute asks for.
#include "model/stage.hpp"
#include "tensor/attention.hpp"
#include "tensor/flash_attention.hpp"

namespace gpt2 {

namespace {

// The whole-sequence problem of a layer's attention: queries, keys and values side by side in qkv,
// tiled for the rank's rows of a sequence (half a sequence a chunk under the ring). The ring moves
// its spans and K/V block.
template <class T>
FlashProblem<T> layer_problem(CMat<T> qkv, int B, int nh, int seq, bool ring, DocStarts doc) {
  const int C = int(qkv.extent(1) / 3), hs = C / nh;
  return FlashProblem<T>{qkv, qkv, C, 2 * C, AttnSpan::whole(seq), AttnSpan::whole(seq), doc, B, nh, hs,
                         flash::tile_for<T>(hs, ring ? seq / 2 : seq)};
}

// The ring's two K/V blocks (one in use, one on its way), the rank's own keys and values copied into
// the first.
template <class T>
void ring_start(Mat<T> (&kv)[2], Buffer<T> (&bufs)[2], CMat<T> qkv, size_t rows, int C) {
  for (int k = 0; k < 2; ++k) kv[k] = mat(bufs[k].data(), rows, 2 * C);
  Kokkos::deep_copy(ExecSpace(), kv[0], Kokkos::subview(qkv, Kokkos::ALL, Kokkos::make_pair(C, 3 * C)));
}

}  // namespace

// Fused attention (tensor/flash_attention.hpp). One rank: one call over the whole sequence. Context
// parallelism's ring: the rank's queries (its two chunks of each sequence) against every rank's K/V
// block in turn -- its own first, then each received from the previous rank while the next is on its
// way -- the online softmax's state (y unnormalised, the running max and sum) carried between them.
template <class T>
void Stage<T>::fused_attention_forward(Mat<T> y, Vec<T> lse, CMat<T> qkv, int B, DocStarts doc) {
  const int c = par_.cp->size(), i = par_.cp->rank(), nh = config().n_head / par_.tp->size();
  FlashProblem<T> p = layer_problem<T>(qkv, B, nh, par_.seq, c > 1, doc);
  if (c == 1) {
    flash_attention_forward<T>(p, y, Vec<T>(), Vec<T>(), lse, FlashPass{});
    return;
  }
  const int L = par_.seq / 2, C = p.kcol;
  const size_t rows = size_t(B) * par_.seq, n = rows * 2 * C;
  Mat<T> kv[2];
  ring_start<T>(kv, par_.ring_kv, qkv, rows, C);
  const Vec<T> m(buf_.flash_d.data(), size_t(B) * nh * par_.seq), l(par_.ring_l.data(), size_t(B) * nh * par_.seq);
  p.qs = AttnSpan::ring(L, c, i);
  for (int s = 0; s < c; ++s) {
    const Mat<T> cur = kv[s % 2];
    if (s + 1 < c) par_.cp->start_shift(cur.data(), kv[(s + 1) % 2].data(), n);
    p.kv = cur, p.kcol = 0, p.vcol = C;
    p.ks = AttnSpan::ring(L, c, (i - s + c) % c);
    flash_attention_forward<T>(p, y, m, l, lse, FlashPass{s == 0, s == c - 1});
    if (s + 1 < c) par_.cp->finish_shifts();
  }
}

// The backward: the queries' gradient from each block in turn, and each block's keys' and values'
// gradient, which goes round the ring with its block (every rank adds its queries' part); after cp
// shifts each block's gradient is back with its own rank.
template <class T>
void Stage<T>::fused_attention_backward(Mat<T> dqkv, CMat<T> dy, CMat<T> qkv, CMat<T> y, CVec<T> lse, int B,
                                        DocStarts doc) {
  const int c = par_.cp->size(), i = par_.cp->rank(), nh = config().n_head / par_.tp->size();
  const Vec<T> D(buf_.flash_d.data(), size_t(B) * nh * par_.seq);
  flash_attention_row_dots<T>(D, dy, y, par_.seq, nh);
  FlashProblem<T> p = layer_problem<T>(qkv, B, nh, par_.seq, c > 1, doc);
  if (c == 1) {
    flash_attention_backward_dq<T>(p, dqkv, dy, lse, D, false);
    flash_attention_backward_dkv<T>(p, dqkv, dy, lse, D, false);  // (into dqkv's k and v columns)
    return;
  }
  const int L = par_.seq / 2, C = p.kcol;
  const size_t rows = size_t(B) * par_.seq, n = rows * 2 * C;
  Mat<T> kv[2];
  ring_start<T>(kv, par_.ring_kv, qkv, rows, C);
  Mat<T> dkv[2] = {mat(par_.ring_dkv[0].data(), rows, 2 * C), mat(par_.ring_dkv[1].data(), rows, 2 * C)};
  p.qs = AttnSpan::ring(L, c, i);
  for (int s = 0; s < c; ++s) {
    const Mat<T> cur = kv[s % 2], dcur = dkv[s % 2];
    if (s + 1 < c) par_.cp->start_shift(cur.data(), kv[(s + 1) % 2].data(), n);
    p.kv = cur, p.kcol = 0, p.vcol = C;
    p.ks = AttnSpan::ring(L, c, (i - s + c) % c);
    flash_attention_backward_dq<T>(p, dqkv, dy, lse, D, s > 0);
    flash_attention_backward_dkv<T>(p, dcur, dy, lse, D, s > 0);  // (the rank's own block starts at 0)
    par_.cp->start_shift(dcur.data(), dkv[(s + 1) % 2].data(), n);
    par_.cp->finish_shifts();
  }
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(dqkv, Kokkos::ALL, Kokkos::make_pair(C, 3 * C)), dkv[c % 2]);
}

// Before block l's backward (or a split backward's pass that needs them): selective recomputes
// attention's probabilities from the saved q, k, v (its output goes to scratch: atty is kept); full
// re-runs the block's forward from its input up to the MLP's output projection (its output is kept).
template <class T>
void Stage<T>::recompute_block(int l, Activations<T>& a, CMat<T> in, bool split) {
  if (rc_.on) rc_.on(1 + l, true);
  auto& s = a.blocks[l - first_];
  if (rc_.mode == Recompute::full && !split) {
    block_forward(l, a, in, /*recomputing=*/true);
  } else if (rc_.mode == Recompute::full) {  // the weight pass's inputs are kept: q, k, v, attention, fc
    const int u = block_unit(l);
    const T* pu = store_->params(u);
    const BlockParams p = block_view(pu, l);
    lin_.forward(s.qkv, par_.gather_input(s.ln1, a.B), gemm_weight(u, pu, p.qkvw), p.qkvb);
    attention(s, a.B, a.docs(), false);
    lin_.forward(s.fch, par_.gather_input(s.ln2, a.B), gemm_weight(u, pu, p.fcw), p.fcb);
    store_->release_params(u);
  } else {
    attention(s, a.B, a.docs(), false);
  }
  if (rc_.on) rc_.on(1 + l, false);
}

// Attention's probabilities (or, with context parallelism, the log-sum-exp) into s.att, and its
// output y into s.atty (rounded where 16-bit) when keep_output, else into scratch (a recomputation:
// atty is kept). Under context parallelism with 16-bit inputs, y in fp32 goes beside the log-sum-exp
// either way (the backward's row dots read it there).
template <class T>
void Stage<T>::attention(typename Activations<T>::Block& s, int B, DocStarts doc, bool keep_output) {
  const int nh = config().n_head / par_.tp->size();
  const size_t rows = size_t(B) * par_.seq;
  const Mat<T> scratch = mat(buf_.datty.data(), rows, s.atty.cols());
  if (fused()) {
    const Vec<T> lse(s.att.data(), size_t(B) * nh * par_.seq);
    const Mat<T> y = s.atty.is_low() ? Mat<T>(s.att.data() + s.att.size(), rows, s.atty.cols())
                                     : keep_output ? s.atty.full : scratch;
    fused_attention_forward(y, lse, s.qkv, B, doc);
    if (keep_output && s.atty.is_low()) lin_.store(s.atty, y);
  } else if (keep_output && !s.atty.is_low()) {
    attention_forward<T>(s.atty.full, s.att, s.qkv, B, par_.seq, nh);
  } else {  // (16-bit: the output GEMM writes T, rounded into the saved copy after)
    attention_forward<T>(scratch, s.att, s.qkv, B, par_.seq, nh);
    if (keep_output) lin_.store(s.atty, scratch);
  }
}

// Decoding: the new rows' keys and values into block i's cache, their queries against every cached
// position (tensor/attention.hpp's cached attention: no probabilities kept, nothing to go back over).
template <class T>
void Stage<T>::cached_attention(typename Activations<T>::Block& s, const typename Activations<T>::Decoding& d,
                                int i) {
  kv_cache_store<T>(d.kv[size_t(i)], s.qkv, d.position);
  attention_forward_cached<T>(s.atty.full, d.scores, s.qkv, d.kv[size_t(i)], d.position, config().n_head);
}

// The class is instantiated in stage.cpp; these are the members defined here.
#define GPT2_STAGE_ATTENTION(T)                                                                         \
  template void Stage<T>::fused_attention_forward(Mat<T>, Vec<T>, CMat<T>, int, DocStarts);             \
  template void Stage<T>::fused_attention_backward(Mat<T>, CMat<T>, CMat<T>, CMat<T>, CVec<T>, int, DocStarts); \
  template void Stage<T>::recompute_block(int, Activations<T>&, CMat<T>, bool);                        \
  template void Stage<T>::attention(typename Activations<T>::Block&, int, DocStarts, bool);          \
  template void Stage<T>::cached_attention(typename Activations<T>::Block&,                          \
                                           const typename Activations<T>::Decoding&, int);
GPT2_STAGE_ATTENTION(float)
GPT2_STAGE_ATTENTION(double)
#undef GPT2_STAGE_ATTENTION

}  // namespace gpt2
