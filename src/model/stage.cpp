// Stage: construction, activations, the microbatch's forward and backward, the blocks. The ends of
// the model (embedding, head and loss) are in stage_ends.cpp.
#include "model/stage.hpp"

#include <cmath>

#include "core/error.hpp"
#include "model/param_init.hpp"
#include "tensor/attention.hpp"
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
Stage<T>::Stage(const StageLayout& layout, int max_batch, int seq_len, StageOptions<T> o)
    : layout_(layout), store_(o.store), tp_(o.tp), sp_(o.sequence_parallel), probe_(std::move(o.probe)),
      maxB_(max_batch), T_(seq_len) {
  const ModelConfig& c = config();
  if (!store_) {
    own_ = std::make_unique<FlatStore<T>>(layout_);
    store_ = own_.get();
    params = own_->param_buf;
    grads = own_->grad_buf;
  }
  if (!tp_) {
    single_tp_ = std::make_unique<SingleTp<T>>();
    tp_ = single_tp_.get();
  }
  const size_t tp = size_t(tp_->size());
  if (tp != size_t(layout_.tp().size)) fail("Stage: a tensor-parallel group of ", tp, " for a layout split ", layout_.tp().size, " ways");
  if (sp_ && (size_t(max_batch) * seq_len) % tp != 0)
    fail("Stage: sequence parallelism needs the microbatch's tokens divisible by tp");
  const size_t N = size_t(max_batch) * seq_len, C = c.n_embd;
  dres_ = uninitialized<T>("dres", N * C);
  dln_ = uninitialized<T>("dln", N * C);
  dqkv_ = uninitialized<T>("dqkv", N * 3 * C / tp);
  datt_ = uninitialized<T>("datt", size_t(max_batch) * c.n_head / tp * seq_len * seq_len);
  dfch_ = uninitialized<T>("dfch", N * 4 * C / tp);
  datty_ = uninitialized<T>("datty", N * C / tp);
  if (tp > 1) partial_ = uninitialized<T>("tp_partial", N * C);
  if (sp_) full_ = uninitialized<T>("sp_full", N * C);
  if (layout.has_head()) {
    lnf_ = uninitialized<T>("lnf", N * C);
    logits_ = uninitialized<T>("logits", N * size_t(layout_.local_vocab()));
    lse_ = uninitialized<T>("lse", N);
    if (tp > 1) ce_ = uninitialized<T>("ce_sums", 3 * N);
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
  const size_t tp = size_t(tp_->size()), N = size_t(B) * T_, R = size_t(stream_rows(B)), C = c.n_embd;
  const size_t att = size_t(B) * c.n_head / tp * T_ * T_;
  const int nblocks = layout_.end_layer() - layout_.first_layer();
  auto pad = [](size_t n) { return (n + 63) / 64 * 64; };  // keep every slice 256-byte aligned
  // Stream tensors (input, ln1, res2, ln2, res3 and the statistics) have R rows; the tensor-parallel
  // region's (qkv, att, atty, fch) have all N rows and 1/tp of the columns.
  const size_t per_block = pad(R * C) * 4 + pad(N * 3 * C / tp) + pad(att) + pad(N * C / tp) +
                           pad(N * 4 * C / tp) * 2 + pad(R) * 4;
  const size_t head = layout_.has_head() ? pad(R) * 2 + pad(R * C) : 0;
  Activations<T> a;
  a.B = B;
  a.seq_len = T_;
  a.mem = uninitialized<T>("activations", pad(R * C) + nblocks * per_block + head);
  a.tokens = decltype(a.tokens)("tokens", N);
  a.targets = decltype(a.targets)("targets", N);
  size_t off = 0;
  auto take = [&](size_t n) {
    T* p = a.mem.data() + off;
    off += pad(n);
    return p;
  };
  auto m = [&](size_t rows, size_t cols) { return Mat<T>(take(rows * cols), rows, cols); };
  auto v = [&]() { return Vec<T>(take(R), R); };
  a.input = m(R, C);
  a.blocks.resize(nblocks);
  for (auto& s : a.blocks) {
    s.ln1 = m(R, C);
    s.qkv = m(N, 3 * C / tp);
    s.att = Mat<T>(take(att), size_t(B) * c.n_head / tp * T_, T_);
    s.atty = m(N, C / tp);
    s.res2 = m(R, C);
    s.ln2 = m(R, C);
    s.fch = m(N, 4 * C / tp);
    s.fch_gelu = m(N, 4 * C / tp);
    s.res3 = m(R, C);
    s.ln1_mean = v();
    s.ln1_rstd = v();
    s.ln2_mean = v();
    s.ln2_rstd = v();
  }
  if (layout_.has_head()) {
    a.lnf_mean = v();
    a.lnf_rstd = v();
    a.dlnf = m(R, C);
  }
  return a;
}

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
Vec<T> Stage<T>::unit_vec(const T* unit, int u, Param kind) const {
  const Range r = layout_.tensor(kind).range, ur = layout_.units()[size_t(u)].range;
  return Vec<T>(const_cast<T*>(unit) + r.begin - ur.begin, r.size());
}

// ---- tensor-parallel regions ------------------------------------------------------------------

template <class T>
CMat<T> Stage<T>::gather(CMat<T> x, int B) {
  if (!sp_) return x;
  Mat<T> full = full_scratch(B);
  tp_->all_gather(x.data(), full.data(), x.size());
  return full;
}

template <class T>
void Stage<T>::reduce_into(Mat<T> out, Mat<T> partial) {
  if (sp_) tp_->reduce_scatter_sum(partial.data(), out.data(), out.size());
  else tp_->all_reduce_sum(partial.data(), partial.size());  // partial is out
}

// ---- the microbatch -----------------------------------------------------------------------------

template <class T>
void Stage<T>::forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  if (layout_.has_embedding()) {
    Probed p(probe_, false, 0);
    embedding_forward_(a);
  }
  Mat<T> x = a.input;
  for (int l = layout_.first_layer(); l < layout_.end_layer(); ++l) {
    Probed p(probe_, false, 1 + l);
    block_forward(l, a, x);
    x = a.blocks[l - layout_.first_layer()].res3;
  }
  if (layout_.has_head()) {
    Probed p(probe_, false, head_unit_id());
    head_forward(a, losses, need_grad, dloss);
  }
}

template <class T>
void Stage<T>::backward(Activations<T>& a) {
  if (layout_.has_head()) {
    Probed p(probe_, true, head_unit_id());
    head_backward(a);
  }
  for (int l = layout_.end_layer() - 1; l >= layout_.first_layer(); --l) {
    Probed p(probe_, true, 1 + l);
    const int i = l - layout_.first_layer();
    if (l > layout_.first_layer()) store_->prefetch_params(block_unit(l - 1));
    block_backward(l, a, i == 0 ? a.input : a.blocks[i - 1].res3);
    store_->grads_done(block_unit(l), false);
  }
  if (layout_.has_embedding()) {
    Probed p(probe_, true, 0);
    embedding_backward_(a);
  }
}

// ---- a block --------------------------------------------------------------------------------------

template <class T>
void Stage<T>::block_forward(int l, Activations<T>& a, CMat<T> in) {
  auto& s = a.blocks[l - layout_.first_layer()];
  const int u = block_unit(l), nh = config().n_head / tp_->size();
  if (l + 1 < layout_.end_layer()) store_->prefetch_params(block_unit(l + 1));  // while this block computes
  const BlockParams p = block_view(store_->params(u), l);
  // A row-parallel projection: the partial products of the tp ranks summed, bias and residual added
  // once.
  auto row_parallel = [&](Mat<T> out, CMat<T> x, CMat<T> w, CVec<T> b, CMat<T> residual) {
    if (!sp_) {
      matmul_forward<T>(out, x, w, adds_once() ? b : CVec<T>(), adds_once() ? residual : CMat<T>());
      reduce_into(out, out);
      return;
    }
    Mat<T> partial = partial_scratch(a.B);
    matmul_forward<T>(partial, x, w, CVec<T>());
    reduce_into(out, partial);
    add_bias_residual<T>(out, b, residual);
  };
  layernorm_forward<T>(s.ln1, s.ln1_mean, s.ln1_rstd, in, p.ln1w, p.ln1b);
  matmul_forward<T>(s.qkv, gather(s.ln1, a.B), p.qkvw, p.qkvb);
  attention_forward<T>(s.atty, s.att, s.qkv, a.B, T_, nh);
  row_parallel(s.res2, s.atty, p.attprojw, p.attprojb, in);  // res2 = in + attproj
  layernorm_forward<T>(s.ln2, s.ln2_mean, s.ln2_rstd, s.res2, p.ln2w, p.ln2b);
  matmul_forward<T>(s.fch, gather(s.ln2, a.B), p.fcw, p.fcb);
  gelu_forward<T>(flat(s.fch_gelu), flat(s.fch));
  row_parallel(s.res3, s.fch_gelu, p.fcprojw, p.fcprojb, s.res2);  // res3 = res2 + mlp
  store_->release_params(u);
}

template <class T>
void Stage<T>::block_backward(int l, Activations<T>& a, CMat<T> in) {
  const auto& s = a.blocks[l - layout_.first_layer()];
  const int u = block_unit(l), nh = config().n_head / tp_->size();
  const BlockParams p = block_view(store_->params(u), l), g = block_view(store_->grads(u), l);
  const size_t N = a.rows(), R = size_t(stream_rows(a.B)), C = config().n_embd, tp = size_t(tp_->size());
  Mat<T> d = dres(a.B);  // d(res3) on entry, d(in) on exit: stream rows
  Mat<T> dfch = as_mat(dfch_, N, 4 * C / tp), dln = as_mat(dln_, R, C);
  Mat<T> datty = as_mat(datty_, N, C / tp), dqkv = as_mat(dqkv_, N, 3 * C / tp);
  Mat<T> datt = as_mat(datt_, s.att.extent(0), T_);
  // A column-parallel input gradient: the tp ranks' partial sums added up into dln (stream rows).
  auto column_parallel_backward = [&](Mat<T> dw, Vec<T> db, CMat<T> dout, CMat<T> x_stream, CMat<T> w) {
    Mat<T> din = sp_ ? partial_scratch(a.B) : dln;
    matmul_backward<T>(din, dw, db, dout, gather(x_stream, a.B), w);
    reduce_into(dln, din);
  };
  // MLP half: res3 = res2 + fcproj(gelu(fc(ln2(res2))))
  matmul_backward<T>(dfch, g.fcprojw, Vec<T>(), gather(d, a.B), s.fch_gelu, p.fcprojw);
  bias_backward<T>(g.fcprojb, d);
  gelu_backward<T>(flat(dfch), flat(s.fch));
  column_parallel_backward(g.fcw, g.fcb, dfch, s.ln2, p.fcw);
  layernorm_backward<T>(d, g.ln2w, g.ln2b, dln, s.res2, p.ln2w, s.ln2_mean, s.ln2_rstd);
  // attention half: res2 = in + attproj(attention(qkv(ln1(in))))
  matmul_backward<T>(datty, g.attprojw, Vec<T>(), gather(d, a.B), s.atty, p.attprojw);
  bias_backward<T>(g.attprojb, d);
  attention_backward<T>(dqkv, datt, datty, s.qkv, s.att, a.B, T_, nh);
  column_parallel_backward(g.qkvw, g.qkvb, dqkv, s.ln1, p.qkvw);
  layernorm_backward<T>(d, g.ln1w, g.ln1b, dln, in, p.ln1w, s.ln1_mean, s.ln1_rstd);
  store_->release_params(u);
}

template class Stage<float>;
template class Stage<double>;

}  // namespace gpt2
