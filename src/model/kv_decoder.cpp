// KvDecoder: the block forward of stage_block.cpp (one rank, fp32 or double) on the new rows only,
// attention over the cached keys and values.
#include "model/kv_decoder.hpp"

#include "core/error.hpp"
#include "tensor/attention.hpp"
#include "tensor/embedding.hpp"
#include "tensor/gelu.hpp"
#include "tensor/layernorm.hpp"
#include "tensor/matmul.hpp"

namespace gpt2 {

template <class T>
bool KvDecoder<T>::supports(const Stage<T>& stage) {
  const StageLayout& L = stage.layout();
  return L.has_embedding() && L.has_head() && L.tp().size == 1 && L.chunks().size() == 1 &&
         stage.params.extent(0) == L.local_size() && L.local_size() > 0;
}

template <class T>
KvDecoder<T>::KvDecoder(const Stage<T>& stage, int max_len)
    : stage_(stage), max_len_(max_len > 0 ? max_len : stage.seq_len()) {
  const StageLayout& L = stage.layout();
  const ModelConfig& c = stage.config();
  if (!supports(stage)) fail("KvDecoder: the stage must hold the whole model on one rank, in its own buffers");
  if (max_len_ > c.block_size) fail("KvDecoder: ", max_len_, " positions, more than block_size ", c.block_size);
  const size_t R = size_t(max_len_), C = size_t(c.n_embd);
  kv_ = Buffer<T>("kv_cache", size_t(c.n_layer) * R * 2 * C);
  x_ = Buffer<T>("kv_x", R * C), res2_ = Buffer<T>("kv_res2", R * C), ln_ = Buffer<T>("kv_ln", R * C);
  qkv_ = Buffer<T>("kv_qkv", R * 3 * C), atty_ = Buffer<T>("kv_atty", R * C);
  fch_ = Buffer<T>("kv_fch", R * 4 * C), gelu_ = Buffer<T>("kv_gelu", R * 4 * C);
  att_ = Buffer<T>("kv_att", size_t(c.n_head) * R * R);
  mean_ = Buffer<T>("kv_mean", R), rstd_ = Buffer<T>("kv_rstd", R);
  lnf_ = Buffer<T>("kv_lnf", C), logits_ = Buffer<T>("kv_logits", size_t(L.local_vocab()));
  tokens_ = decltype(tokens_)("kv_tokens", R);
}

template <class T>
Vec<T> KvDecoder<T>::append(const int* host_tokens, int n) {
  if (n <= 0 || len_ + n > max_len_) fail("KvDecoder::append: ", n, " tokens after ", len_, " of ", max_len_);
  const StageLayout& lay = stage_.layout();
  const ModelConfig& c = stage_.config();
  const size_t C = size_t(c.n_embd), N = size_t(n), Vp = size_t(lay.local_vocab());
  T* p = stage_.params.data();
  auto vec_of = [&](Param k, int l) {
    const Range r = lay.tensor(k, l).range;
    return CVec<T>(p + r.begin, r.size());
  };
  auto mat_of = [&](Param k, int l) {
    const TensorInfo& t = lay.tensor(k, l);
    return CMat<T>(p + t.range.begin, t.shape[0], t.shape[1]);
  };
  using HostInts = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  Kokkos::deep_copy(ExecSpace(), Kokkos::subview(tokens_, Kokkos::make_pair(size_t(0), N)), HostInts(host_tokens, N));
  // Rows i at positions len_ + i: wpe from row len_ on (seq_len n: row i's position is i there).
  Mat<T> x(x_.data(), N, C), res2(res2_.data(), N, C), ln(ln_.data(), N, C);
  Mat<T> qkv(qkv_.data(), N, 3 * C), atty(atty_.data(), N, C), fch(fch_.data(), N, 4 * C), gelu(gelu_.data(), N, 4 * C);
  Vec<T> mean(mean_.data(), N), rstd(rstd_.data(), N);
  const CMat<T> wte = mat_of(Param::wte, -1), wpe = mat_of(Param::wpe, -1);
  embedding_forward<T>(x, Tokens(tokens_.data(), N), wte, CMat<T>(wpe.data() + size_t(len_) * C, c.block_size - len_, C),
                       n);
  for (int l = 0; l < c.n_layer; ++l) {
    Mat<T> kv(kv_.data() + size_t(l) * max_len_ * 2 * C, size_t(max_len_), 2 * C);
    layernorm_forward<T>(ln, mean, rstd, x, vec_of(Param::ln1w, l), vec_of(Param::ln1b, l));
    matmul_forward<T>(qkv, ln, mat_of(Param::qkvw, l), vec_of(Param::qkvb, l));
    kv_cache_store<T>(kv, qkv, len_);
    attention_forward_cached<T>(atty, Vec<T>(att_.data(), att_.extent(0)), qkv, kv, len_, c.n_head);
    // res2 = x + attproj, and ln2 of it (stage_block.cpp's fused pass); then the MLP into x.
    matmul_forward<T>(res2, atty, mat_of(Param::attprojw, l), CVec<T>());
    residual_layernorm_forward<T>(res2, vec_of(Param::attprojb, l), x, ln, mean, rstd, vec_of(Param::ln2w, l),
                                  vec_of(Param::ln2b, l));
    matmul_forward<T>(fch, ln, mat_of(Param::fcw, l), CVec<T>());
    bias_gelu_forward<T>(fch, vec_of(Param::fcb, l), gelu);
    matmul_forward<T>(x, gelu, mat_of(Param::fcprojw, l), vec_of(Param::fcprojb, l), res2);
  }
  // The head on the last row only: its logits are all that decoding reads.
  Mat<T> lnf(lnf_.data(), 1, C), logits(logits_.data(), 1, Vp);
  layernorm_forward<T>(lnf, Vec<T>(mean_.data(), 1), Vec<T>(rstd_.data(), 1), CMat<T>(x.data() + (N - 1) * C, 1, C),
                       vec_of(Param::lnfw, -1), vec_of(Param::lnfb, -1));
  const TensorInfo& head = lay.tensor(Param::wte, -1);  // the tied wte (one rank: the embedding's)
  matmul_forward<T>(logits, lnf, CMat<T>(p + head.range.begin, Vp, C), CVec<T>());
  len_ += n;
  rows_ += n;
  return Vec<T>(logits_.data(), Vp);
}

template class KvDecoder<float>;
template class KvDecoder<double>;

}  // namespace gpt2
