// Stage: the ends of the model -- the (vocabulary-parallel) embedding on the first stage, the final
// LayerNorm, tied LM head and (vocabulary-parallel) loss on the last.
#include <algorithm>

#include "model/stage.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/embedding.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"

namespace gpt2 {

template <class T>
void Stage<T>::embedding_forward_(Activations<T>& a) {
  const ModelConfig& c = config();
  const int wte = layout_.unit_index(UnitKind::wte), wpe = layout_.unit_index(UnitKind::wpe);
  store_->prefetch_params(wpe);
  const T* pwte = store_->params(wte);
  const T* pwpe = store_->params(wpe);
  // Each tp rank looks up the tokens of its vocabulary rows (one adds wpe); the sum is the embedding.
  Mat<T> out = par_.sp ? par_.partial_scratch(a.B) : a.input;
  // (Document masks: each row's position in its document, a position per row.)
  const bool docs = a.doc_positions.extent(0) > 0;
  embedding_forward<T>(out, a.tokens, Mat<T>(const_cast<T*>(pwte), layout_.local_vocab(), c.n_embd),
                       Mat<T>(const_cast<T*>(pwpe), c.block_size, c.n_embd), docs ? int(a.rows()) : par_.seq,
                       layout_.vocab_begin(), par_.adds_once(), docs ? Vec<const int>(a.doc_positions) : Vec<const int>(par_.positions));
  par_.reduce_into(a.input, out);
  store_->release_params(wte);
  store_->release_params(wpe);
}

template <class T>
void Stage<T>::embedding_backward_(Activations<T>& a, CMat<T> d) {
  const ModelConfig& c = config();
  const int wte = layout_.unit_index(UnitKind::wte), wpe = layout_.unit_index(UnitKind::wpe);
  // Every rank needs all rows' gradients for its vocabulary rows. With sequence parallelism wpe's
  // gradient goes where wpe was added (the replicated tensors' partial sums are added up later);
  // without it every rank gets the same one.
  const bool wpe_here = !par_.sp || par_.adds_once(), docs = a.doc_positions.extent(0) > 0;
  const Mat<T> dwpe = wpe_here ? Mat<T>(store_->grads(wpe), c.block_size, c.n_embd) : Mat<T>();
  const CMat<T> dout = par_.gather(d, a.B);
  const Mat<T> dwte(store_->grads(wte), layout_.local_vocab(), c.n_embd);
  first_write(wte, dwte, false);  // added to (scatters): a product after them must add too
  first_write(wpe, dwpe, false);
  embedding_backward<T>(dwte, docs ? Mat<T>() : dwpe, dout,
                        a.groups, Mat<T>(buf_.wte_parts.data(), size_t(a.groups.parts), c.n_embd), par_.seq,
                        layout_.vocab_begin(), par_.positions);
  // Document masks: wpe's rows summed by the rows' positions in their documents (after wte's
  // partial sums are spent: the same stream).
  if (docs && wpe_here)
    grouped_row_sum<T>(dwpe, dout, a.position_groups,
                       Mat<T>(buf_.wte_parts.data(), size_t(a.position_groups.parts), c.n_embd));
  store_->grads_done(wpe, false);
  store_->grads_done(wte, false);
}

// The head: the final LayerNorm, then the logits, the loss and (need_grad) their gradients -- wte's,
// and d(lnf) for the backward -- a block of rows at a time (loss_chunk_rows), so the whole (N, V)
// logits never exist.
template <class T>
template <class S>
void Stage<T>::final_norm(Mat<S> out, Vec<T> mean, Vec<T> rstd, CMat<T> in) {
  const int norm = layout_.unit_index(UnitKind::final_norm);
  const T* p = store_->params(norm);
  layernorm_forward<T>(out, mean, rstd, in, unit_vec(p, norm, Param::lnfw), unit_vec(p, norm, Param::lnfb));
  store_->release_params(norm);
}

template <class T>
void Stage<T>::head_forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  const ModelConfig& c = config();
  const size_t N = a.rows(), R = size_t(stream_rows(a.B)), C = c.n_embd, Vl = size_t(layout_.local_vocab());
  const int wu = layout_.head_wte_unit();
  store_->prefetch_params(wu);
  // lnf: the LM head's input, 16-bit under mixed precision (the head's GEMMs all read it).
  const GemmInput<T> lnf = lin_.mixed() ? GemmInput<T>::low_bits(buf_.lnf16.data(), R, C) : GemmInput<T>(Mat<T>(buf_.lnf.data(), R, C));
  lin_.write(lnf, [&](auto out) { final_norm(out, a.lnf_mean, a.lnf_rstd, a.output()); });
  // wte is read by the forward GEMM and the input gradient's: the working copy, or rounded once here.
  const T* pw = store_->params(wu);
  GemmInput<T> wte = gemm_weight(wu, pw, CMat<T>(pw, Vl, C));
  if (!wte.is_low()) wte = lin_.hold(0, CMat<T>(pw, Vl, C));
  const GemmInput<T> lnf_rows = par_.gather_input(lnf, a.B);  // the LM head needs every row
  const Mat<T> din = !need_grad ? Mat<T>() : par_.sp ? par_.partial_scratch(a.B) : a.dlnf;
  const size_t block = loss_chunk_rows(k_.loss_rows, N, Vl);
  for (size_t r0 = 0; r0 < N; r0 += block)
    head_rows(a, r0, std::min(block, N - r0), lnf_rows, wte, din, losses, need_grad, dloss);
  if (need_grad) par_.reduce_into(a.dlnf, din);
  store_->release_params(wu);
  if (need_grad && layout_.units()[size_t(wu)].grads_final_in_forward()) store_->grads_done(wu, true);
}

template <class T>
void Stage<T>::head_rows(Activations<T>& a, size_t r0, size_t n, const GemmInput<T>& lnf_rows, const GemmInput<T>& wte,
                         Mat<T> din, Vec<T> losses, bool need_grad, T dloss) {
  const size_t Vl = size_t(layout_.local_vocab());
  const int V = config().vocab_size, wu = layout_.head_wte_unit();
  const Mat<T> logits(buf_.logits.data(), n, Vl);
  const Tokens targets(a.targets.data() + r0, n);
  const Vec<T> loss(losses.data() + r0, n);
  const GemmInput<T> in = lnf_rows.row_block(r0, n);
  lin_.forward(logits, in, wte, Vec<T>());
  GemmInput<T> dlogits = lin_.hold_storage(1, n, Vl);  // mixed precision: the loss writes it in 16 bits
  if (par_.tp->size() > 1) {
    parallel_loss(logits, targets, loss, need_grad, dloss);
    if (need_grad) dlogits = lin_.hold(1, logits);  // its dlogits are fp32: rounded once here
  } else if (!need_grad) {
    crossentropy_forward<T>(loss, Vec<T>(buf_.lse.data() + r0, n), logits, targets, V);
  } else if (dlogits.is_low()) {
    lin_.write(dlogits, [&](auto out) { crossentropy_fused<T>(loss, logits, targets, V, dloss, out); });
  } else {
    crossentropy_fused<T>(loss, logits, targets, V, dloss);  // logits -> dlogits
    dlogits = GemmInput<T>(logits);
  }
  if (!need_grad) return;
  // d(lnf) = dlogits @ wte: a column-parallel input gradient over the vocabulary; wte's gradient
  // accumulates the blocks'.
  lin_.backward_input(Mat<T>(din.data() + r0 * din.extent(1), n, din.extent(1)), dlogits, wte);
  const Mat<T> dwte(store_->grads(wu), Vl, config().n_embd);
  lin_.backward_weight(dwte, Vec<T>(), dlogits, in, first_write(wu, dwte, true));
}

template <class T>
void Stage<T>::parallel_loss(Mat<T> logits, Tokens targets, Vec<T> losses, bool need_grad, T dloss) {
  const size_t N = logits.extent(0);
  const int begin = layout_.vocab_begin();
  const int cols = std::clamp(config().vocab_size - begin, 0, layout_.local_vocab());  // real tokens here
  Vec<T> mx(buf_.ce.data(), N), sums(buf_.ce.data() + N, 2 * N);
  crossentropy_local_max<T>(mx, logits, cols);
  par_.tp->all_reduce_max(mx.data(), N);
  crossentropy_local_sums<T>(sums, logits, mx, targets, begin, cols);
  par_.tp->all_reduce_sum(sums.data(), 2 * N);
  crossentropy_parallel_finish<T>(losses, logits, mx, sums, targets, begin, cols, dloss, need_grad);
}

template <class T>
void Stage<T>::head_backward(Activations<T>& a, Pass pass) {
  const int norm = layout_.unit_index(UnitKind::final_norm);
  const T* p = store_->params(norm);
  if (pass != Pass::backward_weight) {
    Mat<T> d = dres(a.B);
    Kokkos::deep_copy(ExecSpace(), Vec<T>(d.data(), d.size()), T(0));
    layernorm_backward_input<T>(d, a.dlnf, a.output(), unit_vec(p, norm, Param::lnfw), a.lnf_mean, a.lnf_rstd);
  }
  if (pass != Pass::backward_input) {
    T* g = store_->grads(norm);
    layernorm_backward_params<T>(unit_vec(g, norm, Param::lnfw), unit_vec(g, norm, Param::lnfb), a.dlnf, a.output(),
                                 a.lnf_mean, a.lnf_rstd);
    store_->grads_done(norm, false);
  }
  store_->release_params(norm);
}

// Decoding's head: the final LayerNorm of one row (the last new position) and its logits, no loss.
// (Its statistics and normalised row go in the head's slices; decoding keeps no gradient.)
template <class T>
void Stage<T>::decode_head(Activations<T>& a, CMat<T> row, Vec<T> logits) {
  const size_t C = config().n_embd, Vl = size_t(layout_.local_vocab());
  const int wu = layout_.head_wte_unit();
  const Mat<T> lnf(a.dlnf.data(), 1, C);
  final_norm(lnf, Vec<T>(a.lnf_mean.data(), 1), Vec<T>(a.lnf_rstd.data(), 1), row);
  const T* pw = store_->params(wu);
  lin_.forward(Mat<T>(logits.data(), 1, Vl), GemmInput<T>(lnf), gemm_weight(wu, pw, CMat<T>(pw, Vl, C)), Vec<T>());
  store_->release_params(wu);
}

// The class is instantiated in stage.cpp; these are the members defined here.
#define GPT2_STAGE_ENDS(T)                                                            \
  template void Stage<T>::embedding_forward_(Activations<T>&);                         \
  template void Stage<T>::embedding_backward_(Activations<T>&, CMat<T>);               \
  template void Stage<T>::head_forward(Activations<T>&, Vec<T>, bool, T);              \
  template void Stage<T>::parallel_loss(Mat<T>, Tokens, Vec<T>, bool, T);               \
  template void Stage<T>::head_rows(Activations<T>&, size_t, size_t, const GemmInput<T>&, const GemmInput<T>&, \
                                    Mat<T>, Vec<T>, bool, T);                                                   \
  template void Stage<T>::head_backward(Activations<T>&, Pass);                                              \
  template void Stage<T>::decode_head(Activations<T>&, CMat<T>, Vec<T>);
GPT2_STAGE_ENDS(float)
GPT2_STAGE_ENDS(double)
#undef GPT2_STAGE_ENDS

}  // namespace gpt2
