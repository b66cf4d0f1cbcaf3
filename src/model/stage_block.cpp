// Stage: one transformer block -- views of its parameters (and their 16-bit working copy), its
// forward and its backward, whole or as the input and weight passes of a split backward.
#include "model/stage.hpp"
#include "tensor/attention.hpp"
#include "tensor/gelu.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"
#include "tensor/residual.hpp"

namespace gpt2 {

template <class T>
typename Stage<T>::BlockParams Stage<T>::block_view(const T* unit, int l) const {
  const size_t base = layout_.block(l).begin;
  T* p = const_cast<T*>(unit);
  auto v = [&](Param k) {
    const Range r = layout_.tensor(k, l).range;
    return Vec<T>(p + r.begin - base, r.size());
  };
  auto m = [&](Param k) {
    const TensorInfo& t = layout_.tensor(k, l);
    return Mat<T>(p + t.range.begin - base, t.shape[0], t.shape[1]);
  };
  return {v(Param::ln1w),     v(Param::ln1b), v(Param::qkvb), v(Param::attprojb), v(Param::ln2w),
          v(Param::ln2b),     v(Param::fcb),  v(Param::fcprojb), m(Param::qkvw),  m(Param::attprojw),
          m(Param::fcw),      m(Param::fcprojw)};
}

template <class T>
GemmInput<T> Stage<T>::gemm_weight(int u, const T* unit, CMat<T> w) {
  const uint16_t* low = lin_.mixed() ? store_->low_params(u) : nullptr;
  if (!low) return GemmInput<T>(w);
  return GemmInput<T>::low_bits(const_cast<uint16_t*>(low) + (w.data() - unit), w.extent(0), w.extent(1));
}

template <class T>
typename Stage<T>::GemmWeights Stage<T>::gemm_weights(int u, const T* unit, const BlockParams& p) {
  return {gemm_weight(u, unit, p.qkvw), gemm_weight(u, unit, p.attprojw), gemm_weight(u, unit, p.fcw),
          gemm_weight(u, unit, p.fcprojw)};
}

// ---- forward and backward --------------------------------------------------------------------------------------

template <class T>
void Stage<T>::block_forward(int l, Activations<T>& a, CMat<T> in, bool recomputing) {
  auto& s = a.blocks[l - first_];
  const int u = block_unit(l);
  if (l + 1 < end_ && !recomputing) store_->prefetch_params(block_unit(l + 1));  // while this block computes
  const T* pu = store_->params(u);
  const BlockParams p = block_view(pu, l);
  const GemmWeights w16 = gemm_weights(u, pu, p);
  // A row-parallel projection: the partial products of the tp ranks summed, bias and residual added
  // once.
  auto row_parallel = [&](Mat<T> out, const GemmInput<T>& x, const GemmInput<T>& w, CVec<T> b, CMat<T> residual) {
    if (!par_.sp) {
      lin_.forward(out, x, w, par_.adds_once() ? b : CVec<T>(), par_.adds_once() ? residual : CMat<T>());
      par_.reduce_into(out, out);
      return;
    }
    Mat<T> partial = par_.partial_scratch(a.B);
    lin_.forward(partial, x, w, CVec<T>());
    par_.reduce_into(out, partial);
    add_bias_residual<T>(out, b, residual);
  };
  lin_.write(s.ln1, [&](auto out) { layernorm_forward<T>(out, s.ln1_mean, s.ln1_rstd, in, p.ln1w, p.ln1b); });
  lin_.forward(s.qkv, par_.gather_input(s.ln1, a.B), w16.qkvw, p.qkvb);
  if (a.decoding.kv.empty()) attention(s, a.B, a.docs(), true);
  else cached_attention(s, a.decoding, l - first_);
  // res2 = in + attproj, then ln2 of it: the bias and residual in the product where the library adds
  // them, else in LayerNorm's pass (one rank) or after the tp ranks' sum.
  if (par_.tp->size() == 1 && !lin_.fuses_epilogue()) {
    lin_.forward(s.res2, s.atty, w16.attprojw, CVec<T>());
    lin_.write(s.ln2, [&](auto out) {
      residual_layernorm_forward<T>(s.res2, p.attprojb, in, out, s.ln2_mean, s.ln2_rstd, p.ln2w, p.ln2b);
    });
  } else {
    row_parallel(s.res2, s.atty, w16.attprojw, p.attprojb, in);
    lin_.write(s.ln2, [&](auto out) { layernorm_forward<T>(out, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2w, p.ln2b); });
  }
  // fc's bias: in the product, or in GELU's pass.
  if (lin_.fuses_epilogue()) {
    lin_.forward(s.fch, par_.gather_input(s.ln2, a.B), w16.fcw, p.fcb);
    lin_.write(s.fch_gelu, [&](auto out) { gelu_forward<T>(flat(out), flat(s.fch)); });
  } else {
    lin_.forward(s.fch, par_.gather_input(s.ln2, a.B), w16.fcw, CVec<T>());
    lin_.write(s.fch_gelu, [&](auto out) { bias_gelu_forward<T>(s.fch, p.fcb, out); });
  }
  // res3 = res2 + mlp; a recomputation skips it: the backward needs the block's inner tensors, and
  // its output is kept (as the next block's input).
  if (!recomputing) row_parallel(s.res3, s.fch_gelu, w16.fcprojw, p.fcprojb, s.res2);
  store_->release_params(u);
}

template <class T>
void Stage<T>::column_parallel_input(Mat<T> dln, const GemmInput<T>& dout, const GemmInput<T>& w, int B) {
  Mat<T> din = par_.sp ? par_.partial_scratch(B) : dln;
  lin_.backward_input(din, dout, w);
  par_.reduce_into(dln, din);
}

// One block's backward, whole or one of its two passes. Each operation does its input-gradient part
// (B) and its weight-gradient part (W); in a split backward the gradients W needs are kept in the
// block's activations instead of scratch, so W can run later on them.
template <class T>
void Stage<T>::block_backward(int l, Activations<T>& a, CMat<T> in, Pass pass) {
  auto& s = a.blocks[l - first_];
  const int u = block_unit(l), nh = config().n_head / par_.tp->size();
  const bool do_in = pass != Pass::backward_weight, do_w = pass != Pass::backward_input;
  const bool keep = pass != Pass::backward;
  const T* pu = store_->params(u);
  const BlockParams p = block_view(pu, l);
  const GemmWeights w16 = do_in ? gemm_weights(u, pu, p) : GemmWeights{};
  const BlockParams g = do_w ? block_view(store_->grads(u), l) : BlockParams{};
  const size_t N = a.rows(), R = size_t(stream_rows(a.B)), C = config().n_embd, tp = size_t(par_.tp->size());
  Mat<T> d = dres(a.B);  // d(res3) on entry, d(in) on exit: stream rows
  Mat<T> d3 = keep ? s.d3 : d, d2 = keep ? s.d2 : d;
  Mat<T> dfch = keep ? s.dfch : mat(buf_.dfch.data(), N, 4 * C / tp);
  Mat<T> dqkv = keep ? s.dqkv : mat(buf_.dqkv.data(), N, 3 * C / tp);
  Mat<T> dln2 = keep ? s.dln2 : mat(buf_.dln.data(), R, C), dln1 = keep ? s.dln1 : mat(buf_.dln.data(), R, C);
  Mat<T> datty = mat(buf_.datty.data(), N, C / tp);
  Mat<T> datt = mat(buf_.datt.data(), buf_.datt.extent(0) ? s.att.extent(0) : 0, par_.seq);
  // A row-parallel projection's backward from the stream gradient d (kept for W when it comes later):
  // its input gradient (B), its weight and bias gradients (W).
  auto row_parallel_backward = [&](Mat<T> kept, Mat<T> din, const GemmInput<T>& act, const GemmInput<T>& w, Mat<T> dw,
                                   Vec<T> db) {
    if (do_in && keep) Kokkos::deep_copy(ExecSpace(), kept, d);
    const CMat<T> gathered = par_.gather(kept, a.B);
    const GemmInput<T> rows = do_in && do_w ? lin_.hold(2, gathered) : GemmInput<T>(gathered);  // rounded once
    if (do_in) lin_.backward_input(din, rows, w);
    if (do_w) {
      weight_gradient(u, dw, rows, act);  // (act has all N rows)
      bias_backward<T>(db, kept);
    }
  };
  // A column-parallel layer's GEMMs from its output gradient dout (N rows) as they read it: the input
  // gradient into dln (B), the weight gradient (W); and the whole backward, the bias gradient too.
  auto column_parallel_gemms = [&](Mat<T> dln, const GemmInput<T>& dout, const GemmInput<T>& act,
                                   const GemmInput<T>& w, Mat<T> dw) {
    if (do_in) column_parallel_input(dln, dout, w, a.B);
    if (do_w) weight_gradient(u, dw, dout, act);
  };
  auto column_parallel_backward = [&](Mat<T> dln, CMat<T> dout, const GemmInput<T>& act, const GemmInput<T>& w,
                                      Mat<T> dw, Vec<T> db) {
    column_parallel_gemms(dln, do_in && do_w ? lin_.hold(2, dout) : GemmInput<T>(dout), act, w, dw);  // (likewise)
    if (do_w) bias_backward<T>(db, dout);
  };
  // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
  row_parallel_backward(d3, dfch, s.fch_gelu, w16.fcprojw, g.fcprojw, g.fcprojb);
  if (do_in && do_w) {  // GELU's backward, fc's bias gradient and the GEMMs' operand in one pass
    const GemmInput<T> dpre = lin_.mixed() ? lin_.hold_storage(2, N, dfch.extent(1)) : GemmInput<T>(dfch);
    lin_.write(dpre, [&](auto out) { gelu_bias_backward<T>(out, g.fcb, dfch, s.fch); });
    column_parallel_gemms(dln2, dpre, par_.gather_input(s.ln2, a.B), w16.fcw, g.fcw);
  } else {
    if (do_in) gelu_backward<T>(flat(dfch), flat(s.fch));
    column_parallel_backward(dln2, dfch, par_.gather_input(s.ln2, a.B), w16.fcw, g.fcw, g.fcb);
  }
  if (do_in) layernorm_backward_input<T>(d, dln2, s.res2, p.ln2w, s.ln2_mean, s.ln2_rstd);
  if (do_w) layernorm_backward_params<T>(g.ln2w, g.ln2b, dln2, s.res2, s.ln2_mean, s.ln2_rstd);
  // attention half: res2 = in + attproj(attention(qkv(ln1(in))))
  row_parallel_backward(d2, datty, s.atty, w16.attprojw, g.attprojw, g.attprojb);
  if (do_in) {
    if (fused())
      fused_attention_backward(dqkv, datty, s.qkv,
                               s.atty.is_low() ? CMat<T>(s.att.data() + s.att.size(), N, C / tp) : CMat<T>(s.atty.full),
                               Vec<T>(s.att.data(), s.att.size()), a.B, a.docs());
    else
      attention_backward<T>(dqkv, datt, datty, s.qkv, s.att, a.B, par_.seq, nh);
  }
  column_parallel_backward(dln1, dqkv, par_.gather_input(s.ln1, a.B), w16.qkvw, g.qkvw, g.qkvb);
  if (do_in) layernorm_backward_input<T>(d, dln1, in, p.ln1w, s.ln1_mean, s.ln1_rstd);
  if (do_w) layernorm_backward_params<T>(g.ln1w, g.ln1b, dln1, in, s.ln1_mean, s.ln1_rstd);
  store_->release_params(u);
}

// The class is instantiated in stage.cpp; these are the members defined here.
#define GPT2_STAGE_BLOCK(T)                                                                              \
  template typename Stage<T>::BlockParams Stage<T>::block_view(const T*, int) const;                     \
  template GemmInput<T> Stage<T>::gemm_weight(int, const T*, CMat<T>);                                   \
  template typename Stage<T>::GemmWeights Stage<T>::gemm_weights(int, const T*, const BlockParams&);      \
  template void Stage<T>::block_forward(int, Activations<T>&, CMat<T>, bool);                            \
  template void Stage<T>::column_parallel_input(Mat<T>, const GemmInput<T>&, const GemmInput<T>&, int); \
  template void Stage<T>::block_backward(int, Activations<T>&, CMat<T>, Pass);
GPT2_STAGE_BLOCK(float)
GPT2_STAGE_BLOCK(double)
#undef GPT2_STAGE_BLOCK

}  // namespace gpt2
