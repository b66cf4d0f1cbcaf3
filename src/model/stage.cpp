// Stage: construction, the microbatch's forward and backward. A microbatch's activations are cut in
// stage_activations.cpp, a block's forward and backward are in stage_block.cpp, attention's variants
// in stage_attention.cpp, the ends of the model (embedding, head and loss) in stage_ends.cpp.
#include "model/stage.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "model/param_init.hpp"
#include "tensor/attention.hpp"
#include "tensor/column_sum.hpp"
#include "tensor/flash_attention.hpp"
#include "tensor/residual.hpp"

namespace gpt2 {

// Local row j of a sequence (T_local = positions.extent(0) rows): context-parallel rank i's chunk i,
// then its chunk 2cp-1-i (one rank: 0..T-1). (A free function with external linkage: CUDA's device
// lambdas may not live in a constructor.)
void chunk_positions(Kokkos::View<int*, Kokkos::LayoutRight, MemSpace> positions, int cp, int i) {
  const int Tl = int(positions.extent(0)), L = Tl / 2;
  Kokkos::parallel_for(
      "stage_positions", IndexRange(0, Tl),
      KOKKOS_LAMBDA(int j) { positions(j) = cp == 1 ? j : j < L ? i * L + j : (2 * cp - 1 - i) * L + (j - L); });
}

template <class T>
Stage<T>::Stage(const StageLayout& layout, int max_batch, int seq_len, StageOptions<T> o)
    : layout_(layout), store_(o.store), probe_(std::move(o.probe)), k_{o.fused_attention, o.document_masks, o.loss_chunk_rows},
      chunk_(o.chunk), lin_(o.precision) {
  par_.tp = o.tp, par_.cp = o.cp, par_.sp = o.sequence_parallel;
  rc_.on = std::move(o.on_recompute), rc_.mode = o.recompute, rc_.every = o.recompute_every;
  buf_.max_batch = max_batch;
  if (rc_.every < 1) fail("Stage: recompute_every must be >= 1, got ", rc_.every);
  if (chunk_ < 0 || chunk_ >= int(layout_.chunks().size())) fail("Stage: no chunk ", chunk_, " in the layout");
  if (k_.document_masks && !k_.fused_attention) fail("Stage: document masks need fused attention (StageOptions.fused_attention)");
  first_ = layout_.chunks()[size_t(chunk_)].first;
  end_ = layout_.chunks()[size_t(chunk_)].end;
  make_missing_parts();
  const int cp = par_.cp->size();
  if (seq_len % (2 * cp) != 0 && cp > 1) fail("Stage: context parallelism over ", cp, " ranks needs T divisible by ", 2 * cp);
  par_.seq = seq_len / cp, par_.C = config().n_embd;
  par_.positions = decltype(par_.positions)("positions", par_.seq);
  chunk_positions(par_.positions, cp, par_.cp->rank());
  const size_t tp = size_t(par_.tp->size());
  if (tp != size_t(layout_.tp().size)) fail("Stage: a tensor-parallel group of ", tp, " for a layout split ", layout_.tp().size, " ways");
  if (par_.sp && (size_t(max_batch) * seq_len) % tp != 0)
    fail("Stage: sequence parallelism needs the microbatch's tokens divisible by tp");
  allocate_scratch(max_batch);
  const ActivationSizes sizes = activation_sizes(activation_shape(max_batch, false));
  allocate_recompute_scratch(max_batch, sizes);
  check_scratch(sizes);
}

template <class T>
void Stage<T>::make_missing_parts() {
  if (!store_) {
    own_ = std::make_unique<FlatStore<T>>(layout_);
    store_ = own_.get();
    params = own_->param_buf;
    grads = own_->grad_buf;
  }
  if (!par_.tp) {
    par_.single_tp = std::make_unique<SingleTp<T>>();
    par_.tp = par_.single_tp.get();
  }
  if (!par_.cp) {
    par_.single_cp = std::make_unique<SingleCp<T>>();
    par_.cp = par_.single_cp.get();
  }
}

template <class T>
void Stage<T>::allocate_scratch(int max_batch) {
  const ModelConfig& c = config();
  const int cp = par_.cp->size();
  const size_t tp = size_t(par_.tp->size());
  const size_t N = size_t(max_batch) * par_.seq, C = c.n_embd;
  buf_.dres = uninitialized<T>("dres", N * C);
  buf_.dln = uninitialized<T>("dln", N * C);
  buf_.dqkv = uninitialized<T>("dqkv", N * 3 * C / tp);
  const size_t heads = size_t(max_batch) * c.n_head / tp;
  if (!fused()) buf_.datt = uninitialized<T>("datt", heads * par_.seq * par_.seq);
  if (fused()) buf_.flash_d = uninitialized<T>("flash_d", heads * par_.seq);
  if (cp > 1) {
    for (int k = 0; k < 2; ++k) {
      par_.ring_kv[k] = uninitialized<T>("ring_kv", N * 2 * C / tp);
      par_.ring_dkv[k] = uninitialized<T>("ring_dkv", N * 2 * C / tp);
    }
    par_.ring_l = uninitialized<T>("ring_l", heads * par_.seq);
  }
  if (fused()) reserve_flash_scratch<T>(int(C / c.n_head), cp > 1 ? par_.seq / 2 : par_.seq);
  buf_.dfch = uninitialized<T>("dfch", N * 4 * C / tp);
  buf_.datty = uninitialized<T>("datty", N * C / tp);
  if (tp > 1) par_.partial = uninitialized<T>("tp_partial", N * C);
  if (par_.sp) par_.full = uninitialized<T>("sp_full", N * C);
  if (has_embedding()) buf_.wte_parts = uninitialized<T>("wte_parts", size_t(TokenGroups::max_parts(int(N))) * C);
  if (par_.sp && lin_.mixed()) par_.full16 = uninitialized<uint16_t>("sp_full16", N * C);
  if (has_head() && lin_.mixed()) buf_.lnf16 = uninitialized<uint16_t>("lnf16", N * C);
  if (has_head()) {
    buf_.lnf = uninitialized<T>("lnf", N * C);
    buf_.logits = uninitialized<T>("logits", loss_chunk_rows(k_.loss_rows, N, layout_.local_vocab()) * layout_.local_vocab());
    buf_.lse = uninitialized<T>("lse", N);
    if (tp > 1) buf_.ce = uninitialized<T>("ce_sums", 3 * N);
  }
  // The 16-bit GEMM scratch (mixed precision): a rounded operand is at most a microbatch's rows of the
  // widest layer (the MLP's 4C / tp columns) or a weight matrix; the held ones are the head's wte and
  // dlogits and a block's output gradient.
  const size_t wide = std::max(C, 4 * C / tp), V = size_t(layout_.local_vocab());
  const size_t held[Linear<T>::kHoldSlots] = {has_head() ? V * C : 0, has_head() ? loss_chunk_rows(k_.loss_rows, N, V) * V : 0,
                                              N * wide};
  lin_.reserve(std::max(N * wide, wide * C), held);
  reserve_column_sum_scratch<T>(int(N), int(wide));  // (bias and LayerNorm gradients' workspace)
}

template <class T>
void Stage<T>::allocate_recompute_scratch(int max_batch, const ActivationSizes& sizes) {
  if (recomputed_blocks(rc_.mode, rc_.every, first_, end_) > 0) {
    // What recomputed blocks share: the size table's part of the scratch for them.
    ActivationShape none = activation_shape(max_batch, false);
    none.recompute = Recompute::none;
    const ActivationSizes without = activation_sizes(none);
    rc_.mem = uninitialized<T>("recompute", sizes.scratch - without.scratch);
    if (sizes.scratch16 > without.scratch16)
      rc_.mem16 = uninitialized<uint16_t>("recompute16", sizes.scratch16 - without.scratch16);
  }
}

template <class T>
void Stage<T>::check_scratch(const ActivationSizes& sizes) const {
  size_t scratch = 0, scratch16 = par_.full16.extent(0) + buf_.lnf16.extent(0) + rc_.mem16.extent(0);
  for (const Buffer<T>* b : {&buf_.dres, &buf_.dln, &buf_.dqkv, &buf_.datt, &buf_.dfch, &buf_.datty, &par_.partial, &par_.full, &buf_.wte_parts, &buf_.lnf,
                             &buf_.logits, &buf_.lse, &buf_.ce, &rc_.mem, &par_.ring_kv[0], &par_.ring_kv[1], &par_.ring_dkv[0],
                             &par_.ring_dkv[1], &par_.ring_l, &buf_.flash_d})
    scratch += b->extent(0);
  if (scratch != sizes.scratch || scratch16 != sizes.scratch16)
    fail("Stage: its scratch takes ", scratch, " + ", scratch16, " values, the size table says ", sizes.scratch, " + ",
         sizes.scratch16, " (model/activation_sizes)");
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
  Kokkos::deep_copy(ExecSpace(), grads, T(0));
}

template <class T>
Vec<T> Stage<T>::unit_vec(const T* unit, int u, Param kind) const {
  const Range r = layout_.tensor(kind).range, ur = layout_.units()[size_t(u)].range;
  return Vec<T>(const_cast<T*>(unit) + r.begin - ur.begin, r.size());
}

// ---- the microbatch -----------------------------------------------------------------------------

template <class T>
void Stage<T>::forward(Activations<T>& a, Vec<T> losses, bool need_grad, T dloss) {
  forward_blocks(a);
  if (has_head()) {
    Probed p(probe_, Pass::forward, head_unit_id());
    head_forward(a, losses, need_grad, dloss);
  }
}

template <class T>
void Stage<T>::forward_blocks(Activations<T>& a) {
  if (has_embedding()) {
    Probed p(probe_, Pass::forward, 0);
    embedding_forward_(a);
  }
  Mat<T> x = a.input;
  for (int l = first_; l < end_; ++l) {
    Probed p(probe_, Pass::forward, 1 + l);
    block_forward(l, a, x);
    x = a.blocks[l - first_].res3;
  }
}

template <class T>
void Stage<T>::decode(Activations<T>& a, const int* host_tokens, int n, int position, Vec<T> logits) {
  const size_t N = size_t(n);
  if (a.decoding.kv.empty() || n <= 0 || N > a.tokens.extent(0) || position < 0 ||
      size_t(position) + N > a.decoding.kv.front().extent(0))
    fail("Stage::decode: ", n, " rows at position ", position, " do not fit the decoding activations");
  slice_activations(a, decoding_shape(n));
  a.decoding.position = position;
  using HostInts = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(a.tokens, Kokkos::make_pair(size_t(0), N)), HostInts(host_tokens, N));
  const auto positions = a.doc_positions;  // each row's position (the embedding's wpe row)
  Kokkos::parallel_for(
      "decode_positions", IndexRange(0, int64_t(n)), KOKKOS_LAMBDA(int64_t i) { positions(i) = position + int(i); });
  forward_blocks(a);
  const size_t C = size_t(config().n_embd);
  Probed p(probe_, Pass::forward, head_unit_id());
  decode_head(a, CMat<T>(a.output().data() + (N - 1) * C, 1, C), logits);
}

template <class T>
void Stage<T>::backward(Activations<T>& a) {
  run_backward(a, Pass::backward);
}
template <class T>
void Stage<T>::backward_input(Activations<T>& a) {
  run_backward(a, Pass::backward_input);
}
template <class T>
void Stage<T>::backward_weight(Activations<T>& a) {
  run_backward(a, Pass::backward_weight);
}

// The units from the head down to the embedding. A whole backward or a weight pass completes each
// unit's gradient (grads_done); an input pass leaves dres = the gradient of the stage input.
template <class T>
void Stage<T>::run_backward(Activations<T>& a, Pass pass) {
  const bool weights = pass != Pass::backward_input;
  const bool split = a.blocks.front().d3.extent(0) != 0;
  if (pass != Pass::backward && !split) fail("Stage: a split backward needs activations made with split = true");
  if (has_head()) {
    Probed p(probe_, pass, head_unit_id());
    head_backward(a, pass);
  }
  for (int l = end_ - 1; l >= first_; --l) {
    Probed p(probe_, pass, 1 + l);
    const int i = l - first_;
    if (l > first_) store_->prefetch_params(block_unit(l - 1));
    const CMat<T> in = i == 0 ? a.input : a.blocks[i - 1].res3;
    // A split backward's input pass recomputes what its weight pass does not keep; the weight pass
    // then needs nothing again (its inputs are kept in split activations).
    const bool again = recomputed(l) && pass != Pass::backward_weight;
    if (again) store_->params(block_unit(l));  // held over the recomputation and the backward: one gather
    if (again) recompute_block(l, a, in, split);
    block_backward(l, a, in, pass);
    if (again) store_->release_params(block_unit(l));
    if (weights) store_->grads_done(block_unit(l), false);
  }
  if (has_embedding()) {
    // The embedding has only weights: an input pass keeps its gradient for the weight pass.
    if (pass == Pass::backward_input) {
      Kokkos::deep_copy(ExecSpace(), a.dembed, dres(a.B));
    } else {
      Probed p(probe_, pass, 0);
      embedding_backward_(a, pass == Pass::backward ? dres(a.B) : a.dembed);
    }
  }
}

template class Stage<float>;
template class Stage<double>;

}  // namespace gpt2
