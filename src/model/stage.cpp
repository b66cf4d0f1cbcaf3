#include "model/stage.hpp"

#include <cmath>

#include "core/error.hpp"

#include "model/param_init.hpp"
#include "tensor/attention.hpp"
#include "tensor/crossentropy.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"
#include "tensor/residual.hpp"

namespace gpt2 {

namespace {
template <class T>
Buffer<T> uninitialized(const char* label, size_t n) {
  return Buffer<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n);
}
template <class T>
Mat<T> as_mat(const Buffer<T>& b, size_t rows, size_t cols) {
  return Mat<T>(b.data(), rows, cols);
}
}  // namespace

template <class T>
Stage<T>::Stage(const StageLayout& layout, int max_batch, int seq_len, UnitStore<T>* store)
    : layout_(layout), store_(store), maxB_(max_batch), T_(seq_len) {
  const ModelConfig& c = config();
  const size_t N = size_t(max_batch) * seq_len, C = c.n_embd;
  if (!store_) {
    own_ = std::make_unique<FlatStore<T>>(layout_);
    store_ = own_.get();
    params = own_->param_buf;
    grads = own_->grad_buf;
  }
  dres_ = uninitialized<T>("dres", N * C);
  dln_ = uninitialized<T>("dln", N * C);
  dqkv_ = uninitialized<T>("dqkv", N * 3 * C);
  datt_ = uninitialized<T>("datt", size_t(max_batch) * c.n_head * seq_len * seq_len);
  dfch_ = uninitialized<T>("dfch", N * 4 * C);
  datty_ = uninitialized<T>("datty", N * C);
  if (layout.has_head()) {
    lnf_ = uninitialized<T>("lnf", N * C);
    logits_ = uninitialized<T>("logits", N * c.padded_vocab());
    lse_ = uninitialized<T>("lse", N);
  }
}

template <class T>
void Stage<T>::init_params(uint64_t seed) {
  if (!own_) fail("Stage::init_params: the parameters live in an external store");
  gpt2::init_params<T>(layout_.global(), layout_.tensors(), seed, {0, layout_.local_size()},
                       Vec<T>(params.data(), params.extent(0)));
}

template <class T>
void Stage<T>::on_grads_done(std::function<void(int, bool)> f) {
  if (!own_) fail("Stage::on_grads_done: the gradients live in an external store");
  own_->done = std::move(f);
}

template <class T>
void Stage<T>::zero_grads() {
  if (!own_) fail("Stage::zero_grads: the gradients live in an external store");
  Kokkos::deep_copy(grads, T(0));
}

template <class T>
Activations<T> Stage<T>::make_activations(int B) const {
  const ModelConfig& c = config();
  const size_t N = size_t(B) * T_, C = c.n_embd;
  const size_t att = size_t(B) * c.n_head * T_ * T_;
  const int nblocks = layout_.end_layer() - layout_.first_layer();
  auto pad = [](size_t n) { return (n + 63) / 64 * 64; };  // keep every slice 256-byte aligned
  const size_t per_block = pad(N * C) * 6 + pad(N * 3 * C) + pad(att) + pad(N * 4 * C) * 2 + pad(N) * 4;
  const size_t head = layout_.has_head() ? pad(N) * 2 + pad(N * C) : 0;
  Activations<T> a;
  a.B = B;
  a.seq_len = T_;
  a.mem = uninitialized<T>("activations", pad(N * C) + nblocks * per_block + head);
  a.tokens = decltype(a.tokens)("tokens", N);
  a.targets = decltype(a.targets)("targets", N);
  size_t off = 0;
  auto take = [&](size_t n) {
    T* p = a.mem.data() + off;
    off += pad(n);
    return p;
  };
  auto m = [&](size_t cols) { return Mat<T>(take(N * cols), N, cols); };
  auto v = [&]() { return Vec<T>(take(N), N); };
  a.input = m(C);
  a.blocks.resize(nblocks);
  for (auto& s : a.blocks) {
    s.ln1 = m(C);
    s.qkv = m(3 * C);
    s.att = Mat<T>(take(att), size_t(B) * c.n_head * T_, T_);
    s.atty = m(C);
    s.res2 = m(C);
    s.ln2 = m(C);
    s.fch = m(4 * C);
    s.fch_gelu = m(4 * C);
    s.res3 = m(C);
    s.ln1_mean = v();
    s.ln1_rstd = v();
    s.ln2_mean = v();
    s.ln2_rstd = v();
  }
  if (layout_.has_head()) {
    a.lnf_mean = v();
    a.lnf_rstd = v();
    a.dlnf = m(C);
  }
  return a;
}

template <class T>
typename Stage<T>::BlockParams Stage<T>::block_view(const T* unit, int l) const {
  const size_t C = config().n_embd, base = layout_.block(l).begin;
  T* p = const_cast<T*>(unit);
  auto v = [&](Param k) {
    const Range r = layout_.tensor(k, l).range;
    return Vec<T>(p + r.begin - base, r.size());
  };
  auto m = [&](Param k, size_t rows, size_t cols) {
    return Mat<T>(p + layout_.tensor(k, l).range.begin - base, rows, cols);
  };
  return {v(Param::ln1w),         v(Param::ln1b),           v(Param::qkvb),
          v(Param::attprojb),     v(Param::ln2w),           v(Param::ln2b),
          v(Param::fcb),          v(Param::fcprojb),        m(Param::qkvw, 3 * C, C),
          m(Param::attprojw, C, C), m(Param::fcw, 4 * C, C), m(Param::fcprojw, C, 4 * C)};
}

template <class T>
Vec<T> Stage<T>::unit_vec(const T* unit, int u, Param kind) const {
  const Range r = layout_.tensor(kind).range, ur = layout_.units()[size_t(u)].range;
  return Vec<T>(const_cast<T*>(unit) + r.begin - ur.begin, r.size());
}

template <class T>
void Stage<T>::forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  if (layout_.has_embedding()) embedding_forward_(a);
  Mat<T> x = a.input;
  for (int l = layout_.first_layer(); l < layout_.end_layer(); ++l) {
    block_forward(l, a, x);
    x = a.blocks[l - layout_.first_layer()].res3;
  }
  if (layout_.has_head()) head_forward(a, losses, need_grad, dloss);
}

template <class T>
void Stage<T>::embedding_forward_(Activations<T>& a) {
  const ModelConfig& c = config();
  const int wte = layout_.unit_index(UnitKind::wte), wpe = layout_.unit_index(UnitKind::wpe);
  store_->prefetch_params(wpe);
  const T* pwte = store_->params(wte);
  const T* pwpe = store_->params(wpe);
  embedding_forward<T>(a.input, a.tokens, Mat<T>(const_cast<T*>(pwte), c.padded_vocab(), c.n_embd),
                       Mat<T>(const_cast<T*>(pwpe), c.block_size, c.n_embd), T_);
  store_->release_params(wte);
  store_->release_params(wpe);
}

template <class T>
void Stage<T>::block_forward(int l, Activations<T>& a, CMat<T> in) {
  auto& s = a.blocks[l - layout_.first_layer()];
  const int u = block_unit(l);
  if (l + 1 < layout_.end_layer()) store_->prefetch_params(block_unit(l + 1));  // while this block computes
  const BlockParams p = block_view(store_->params(u), l);
  layernorm_forward<T>(s.ln1, s.ln1_mean, s.ln1_rstd, in, p.ln1w, p.ln1b);
  matmul_forward<T>(s.qkv, s.ln1, p.qkvw, p.qkvb);
  attention_forward<T>(s.atty, s.att, s.qkv, a.B, T_, config().n_head);
  matmul_forward<T>(s.res2, s.atty, p.attprojw, p.attprojb, in);  // res2 = in + attproj
  layernorm_forward<T>(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2w, p.ln2b);
  matmul_forward<T>(s.fch, s.ln2, p.fcw, p.fcb);
  gelu_forward<T>(flat(s.fch_gelu), flat(s.fch));
  matmul_forward<T>(s.res3, s.fch_gelu, p.fcprojw, p.fcprojb, s.res2);  // res3 = res2 + mlp
  store_->release_params(u);
}

template <class T>
void Stage<T>::head_forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  const ModelConfig& c = config();
  const size_t N = a.rows(), C = c.n_embd, Vp = c.padded_vocab();
  const int norm = layout_.unit_index(UnitKind::final_norm), wu = layout_.head_wte_unit();
  store_->prefetch_params(wu);
  const T* pnorm = store_->params(norm);
  Mat<T> lnf = as_mat(lnf_, N, C), logits = as_mat(logits_, N, Vp);
  Vec<T> lse(lse_.data(), N);
  layernorm_forward<T>(lnf, a.lnf_mean, a.lnf_rstd, a.output(), unit_vec(pnorm, norm, Param::lnfw),
                       unit_vec(pnorm, norm, Param::lnfb));
  store_->release_params(norm);
  const Mat<T> wte(const_cast<T*>(store_->params(wu)), Vp, C);
  matmul_forward<T>(logits, lnf, wte, Vec<T>());
  if (!need_grad) {
    crossentropy_forward<T>(losses, lse, logits, a.targets, c.vocab_size);
  } else {
    crossentropy_fused<T>(losses, logits, a.targets, c.vocab_size, dloss);  // logits -> dlogits
    matmul_backward<T>(a.dlnf, Mat<T>(store_->grads(wu), Vp, C), Vec<T>(), logits, lnf, wte);
  }
  store_->release_params(wu);
  if (need_grad && layout_.units()[size_t(wu)].grads_final_in_forward()) store_->grads_done(wu, true);
}

template <class T>
void Stage<T>::backward(Activations<T>& a) {
  Mat<T> d = dres(a.B);
  if (layout_.has_head()) {
    const int norm = layout_.unit_index(UnitKind::final_norm);
    Kokkos::deep_copy(Vec<T>(d.data(), d.size()), T(0));
    const T* p = store_->params(norm);
    T* g = store_->grads(norm);
    layernorm_backward<T>(d, unit_vec(g, norm, Param::lnfw), unit_vec(g, norm, Param::lnfb), a.dlnf, a.output(),
                          unit_vec(p, norm, Param::lnfw), a.lnf_mean, a.lnf_rstd);
    store_->release_params(norm);
    store_->grads_done(norm, false);
  }
  for (int l = layout_.end_layer() - 1; l >= layout_.first_layer(); --l) {
    const int i = l - layout_.first_layer();
    if (l > layout_.first_layer()) store_->prefetch_params(block_unit(l - 1));
    block_backward(l, a, i == 0 ? a.input : a.blocks[i - 1].res3);
    store_->grads_done(block_unit(l), false);
  }
  if (layout_.has_embedding()) {
    const ModelConfig& c = config();
    const int wte = layout_.unit_index(UnitKind::wte), wpe = layout_.unit_index(UnitKind::wpe);
    embedding_backward<T>(Mat<T>(store_->grads(wte), c.padded_vocab(), c.n_embd),
                          Mat<T>(store_->grads(wpe), c.block_size, c.n_embd), d, a.tokens, T_);
    store_->grads_done(wpe, false);
    store_->grads_done(wte, false);
  }
}

template <class T>
void Stage<T>::block_backward(int l, Activations<T>& a, CMat<T> in) {
  const auto& s = a.blocks[l - layout_.first_layer()];
  const int u = block_unit(l);
  const BlockParams p = block_view(store_->params(u), l), g = block_view(store_->grads(u), l);
  const size_t N = a.rows(), C = config().n_embd;
  Mat<T> d = dres(a.B);  // d(res3) on entry, d(in) on exit
  Mat<T> dfch = as_mat(dfch_, N, 4 * C), dln = as_mat(dln_, N, C);
  Mat<T> datty = as_mat(datty_, N, C), dqkv = as_mat(dqkv_, N, 3 * C);
  Mat<T> datt = as_mat(datt_, s.att.extent(0), T_);
  // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
  matmul_backward<T>(dfch, g.fcprojw, g.fcprojb, d, s.fch_gelu, p.fcprojw);
  gelu_backward<T>(flat(dfch), flat(s.fch));
  matmul_backward<T>(dln, g.fcw, g.fcb, dfch, s.ln2, p.fcw);
  layernorm_backward<T>(d, g.ln2w, g.ln2b, dln, s.res2, p.ln2w, s.ln2_mean, s.ln2_rstd);
  // attention half: res2 = in + attproj(attention(qkv(ln1(in))))
  matmul_backward<T>(datty, g.attprojw, g.attprojb, d, s.atty, p.attprojw);
  attention_backward<T>(dqkv, datt, datty, s.qkv, s.att, a.B, T_, config().n_head);
  matmul_backward<T>(dln, g.qkvw, g.qkvb, dqkv, s.ln1, p.qkvw);
  layernorm_backward<T>(d, g.ln1w, g.ln1b, dln, in, p.ln1w, s.ln1_mean, s.ln1_rstd);
  store_->release_params(u);
}

template class Stage<float>;
template class Stage<double>;

}  // namespace gpt2
