#include "model/stage.hpp"

#include <cmath>

#include "core/rng.hpp"
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
Stage<T>::Stage(const StageLayout& layout, int max_batch, int seq_len)
    : layout_(layout), maxB_(max_batch), T_(seq_len) {
  const ModelConfig& c = config();
  const size_t N = size_t(max_batch) * seq_len, C = c.n_embd;
  params = Buffer<T>("params", layout.local_size());
  grads = Buffer<T>("grads", layout.local_size());
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
  const ModelConfig& c = config();
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  auto host = Kokkos::create_mirror_view(params);
  for (const TensorInfo& t : layout_.tensors()) {
    Rng rng(seed, layout_.global().index(t.kind, t.layer));
    T* p = host.data() + t.range.begin;
    size_t n = t.range.size();
    double stddev = 0.02, constant = 0;
    switch (t.kind) {
      case Param::wte:
        n = size_t(c.vocab_size) * c.n_embd;  // padded rows stay zero
        for (size_t i = n; i < t.range.size(); ++i) p[i] = 0;
        break;
      case Param::attprojw:
      case Param::fcprojw: stddev = residual_std; break;
      case Param::ln1w:
      case Param::ln2w:
      case Param::lnfw: stddev = 0, constant = 1; break;
      case Param::wpe:
      case Param::qkvw:
      case Param::fcw: break;
      default: stddev = 0; break;  // biases
    }
    for (size_t i = 0; i < n; ++i) p[i] = T(stddev > 0 ? stddev * rng.normal() : constant);
  }
  Kokkos::deep_copy(params, host);
}

template <class T>
void Stage<T>::zero_grads() {
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
typename Stage<T>::BlockParams Stage<T>::block_view(const Buffer<T>& buf, int l) const {
  const size_t C = config().n_embd;
  auto v = [&](Param k) {
    const Range r = layout_.tensor(k, l).range;
    return Vec<T>(buf.data() + r.begin, r.size());
  };
  auto m = [&](Param k, size_t rows, size_t cols) {
    return Mat<T>(buf.data() + layout_.tensor(k, l).range.begin, rows, cols);
  };
  return {v(Param::ln1w),         v(Param::ln1b),           v(Param::qkvb),
          v(Param::attprojb),     v(Param::ln2w),           v(Param::ln2b),
          v(Param::fcb),          v(Param::fcprojb),        m(Param::qkvw, 3 * C, C),
          m(Param::attprojw, C, C), m(Param::fcw, 4 * C, C), m(Param::fcprojw, C, 4 * C)};
}

template <class T>
void Stage<T>::forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  const ModelConfig& c = config();
  if (layout_.has_embedding()) {
    const auto& wte = layout_.tensor(Param::wte);
    const auto& wpe = layout_.tensor(Param::wpe);
    embedding_forward<T>(a.input, a.tokens, Mat<T>(param(wte).data(), c.padded_vocab(), c.n_embd),
                         Mat<T>(param(wpe).data(), c.block_size, c.n_embd), T_);
  }
  Mat<T> x = a.input;
  for (int l = layout_.first_layer(); l < layout_.end_layer(); ++l) {
    block_forward(l, a, x);
    x = a.blocks[l - layout_.first_layer()].res3;
  }
  if (layout_.has_head()) head_forward(a, losses, need_grad, dloss);
}

template <class T>
void Stage<T>::block_forward(int l, Activations<T>& a, CMat<T> in) {
  auto& s = a.blocks[l - layout_.first_layer()];
  const BlockParams p = block_view(params, l);
  layernorm_forward<T>(s.ln1, s.ln1_mean, s.ln1_rstd, in, p.ln1w, p.ln1b);
  matmul_forward<T>(s.qkv, s.ln1, p.qkvw, p.qkvb);
  attention_forward<T>(s.atty, s.att, s.qkv, a.B, T_, config().n_head);
  matmul_forward<T>(s.res2, s.atty, p.attprojw, p.attprojb, in);  // res2 = in + attproj
  layernorm_forward<T>(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2w, p.ln2b);
  matmul_forward<T>(s.fch, s.ln2, p.fcw, p.fcb);
  gelu_forward<T>(flat(s.fch_gelu), flat(s.fch));
  matmul_forward<T>(s.res3, s.fch_gelu, p.fcprojw, p.fcprojb, s.res2);  // res3 = res2 + mlp
}

template <class T>
void Stage<T>::head_forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  const ModelConfig& c = config();
  const size_t N = a.rows(), C = c.n_embd, Vp = c.padded_vocab();
  const auto& wte_t = layout_.tensor(Param::wte);
  Mat<T> wte(param(wte_t).data(), Vp, C), dwte(grad(wte_t).data(), Vp, C);
  Mat<T> lnf = as_mat(lnf_, N, C), logits = as_mat(logits_, N, Vp);
  Vec<T> lse(lse_.data(), N);
  layernorm_forward<T>(lnf, a.lnf_mean, a.lnf_rstd, a.output(), param(layout_.tensor(Param::lnfw)),
                       param(layout_.tensor(Param::lnfb)));
  matmul_forward<T>(logits, lnf, wte, Vec<T>());
  if (!need_grad) {
    crossentropy_forward<T>(losses, lse, logits, a.targets, c.vocab_size);
    return;
  }
  crossentropy_fused<T>(losses, logits, a.targets, c.vocab_size, dloss);  // logits -> dlogits
  matmul_backward<T>(a.dlnf, dwte, Vec<T>(), logits, lnf, wte);
}

template <class T>
void Stage<T>::backward(Activations<T>& a, const std::function<void(size_t)>& ready) {
  auto notify = [&](size_t x) {
    if (ready) ready(x);
  };
  Mat<T> d = dres(a.B);
  if (layout_.has_head()) {
    Kokkos::deep_copy(Vec<T>(d.data(), d.size()), T(0));
    const auto& w = layout_.tensor(Param::lnfw);
    layernorm_backward<T>(d, grad(w), grad(layout_.tensor(Param::lnfb)), a.dlnf, a.output(),
                          param(w), a.lnf_mean, a.lnf_rstd);
    notify(w.range.begin);
  }
  for (int l = layout_.end_layer() - 1; l >= layout_.first_layer(); --l) {
    const int i = l - layout_.first_layer();
    block_backward(l, a, i == 0 ? a.input : a.blocks[i - 1].res3);
    notify(layout_.block(l).begin);
  }
  if (layout_.has_embedding()) {
    const ModelConfig& c = config();
    const auto& wte = layout_.tensor(Param::wte);
    const auto& wpe = layout_.tensor(Param::wpe);
    embedding_backward<T>(Mat<T>(grad(wte).data(), c.padded_vocab(), c.n_embd),
                          Mat<T>(grad(wpe).data(), c.block_size, c.n_embd), d, a.tokens, T_);
  }
  notify(0);
}

template <class T>
void Stage<T>::block_backward(int l, Activations<T>& a, CMat<T> in) {
  const auto& s = a.blocks[l - layout_.first_layer()];
  const BlockParams p = block_view(params, l), g = block_view(grads, l);
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
}

template class Stage<float>;
template class Stage<double>;

}  // namespace gpt2
