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
DecoderScratch<T>::DecoderScratch(size_t R, const ModelConfig& c, size_t local_vocab)
    : x("kv_x", R * size_t(c.n_embd)), res2("kv_res2", R * size_t(c.n_embd)), ln("kv_ln", R * size_t(c.n_embd)),
      qkv("kv_qkv", R * 3 * size_t(c.n_embd)), atty("kv_atty", R * size_t(c.n_embd)),
      fch("kv_fch", R * 4 * size_t(c.n_embd)), gelu("kv_gelu", R * 4 * size_t(c.n_embd)),
      att("kv_att", size_t(c.n_head) * R * R), mean("kv_mean", R), rstd("kv_rstd", R), lnf("kv_lnf", size_t(c.n_embd)),
      logits("kv_logits", local_vocab) {}

// (A stage it cannot read fails before anything is allocated for it: the checks run in max_len's.)
template <class T>
KvDecoder<T>::KvDecoder(const Stage<T>& stage, int max_len)
    : stage_(stage),
      max_len_(checked_length(stage, max_len)),
      kv_("kv_cache", size_t(stage.config().n_layer) * size_t(max_len_) * 2 * size_t(stage.config().n_embd)),
      s_(size_t(max_len_), stage.config(), size_t(stage.layout().local_vocab())),
      tokens_("kv_tokens", size_t(max_len_)) {}

template <class T>
int KvDecoder<T>::checked_length(const Stage<T>& stage, int max_len) {
  if (!supports(stage)) fail("KvDecoder: the stage must hold the whole model on one rank, in its own buffers");
  const int n = max_len > 0 ? max_len : stage.seq_len();
  if (n > stage.config().block_size) fail("KvDecoder: ", n, " positions, more than block_size ", stage.config().block_size);
  return n;
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
  Mat<T> x(s_.x.data(), N, C), res2(s_.res2.data(), N, C), ln(s_.ln.data(), N, C);
  Mat<T> qkv(s_.qkv.data(), N, 3 * C), atty(s_.atty.data(), N, C), fch(s_.fch.data(), N, 4 * C), gelu(s_.gelu.data(), N, 4 * C);
  Vec<T> mean(s_.mean.data(), N), rstd(s_.rstd.data(), N);
  const CMat<T> wte = mat_of(Param::wte, -1), wpe = mat_of(Param::wpe, -1);
  embedding_forward<T>(x, Tokens(tokens_.data(), N), wte, CMat<T>(wpe.data() + size_t(len_) * C, c.block_size - len_, C),
                       n);
  for (int l = 0; l < c.n_layer; ++l) {
    Mat<T> kv(kv_.data() + size_t(l) * max_len_ * 2 * C, size_t(max_len_), 2 * C);
    layernorm_forward<T>(ln, mean, rstd, x, vec_of(Param::ln1w, l), vec_of(Param::ln1b, l));
    matmul_forward<T>(qkv, ln, mat_of(Param::qkvw, l), vec_of(Param::qkvb, l));
    kv_cache_store<T>(kv, qkv, len_);
    attention_forward_cached<T>(atty, Vec<T>(s_.att.data(), s_.att.extent(0)), qkv, kv, len_, c.n_head);
    // res2 = x + attproj, and ln2 of it (stage_block.cpp's fused pass); then the MLP into x.
    matmul_forward<T>(res2, atty, mat_of(Param::attprojw, l), CVec<T>());
    residual_layernorm_forward<T>(res2, vec_of(Param::attprojb, l), x, ln, mean, rstd, vec_of(Param::ln2w, l),
                                  vec_of(Param::ln2b, l));
    matmul_forward<T>(fch, ln, mat_of(Param::fcw, l), CVec<T>());
    bias_gelu_forward<T>(fch, vec_of(Param::fcb, l), gelu);
    matmul_forward<T>(x, gelu, mat_of(Param::fcprojw, l), vec_of(Param::fcprojb, l), res2);
  }
  // The head on the last row only: its logits are all that decoding reads.
  Mat<T> lnf(s_.lnf.data(), 1, C), logits(s_.logits.data(), 1, Vp);
  layernorm_forward<T>(lnf, Vec<T>(s_.mean.data(), 1), Vec<T>(s_.rstd.data(), 1), CMat<T>(x.data() + (N - 1) * C, 1, C),
                       vec_of(Param::lnfw, -1), vec_of(Param::lnfb, -1));
  const TensorInfo& head = lay.tensor(Param::wte, -1);  // the tied wte (one rank: the embedding's)
  matmul_forward<T>(logits, lnf, CMat<T>(p + head.range.begin, Vp, C), CVec<T>());
  len_ += n;
  rows_ += n;
  return Vec<T>(s_.logits.data(), Vp);
}

template struct DecoderScratch<float>;
template struct DecoderScratch<double>;
template class KvDecoder<float>;
template class KvDecoder<double>;

}  // namespace gpt2
