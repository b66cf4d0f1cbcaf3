// KvDecoder: the Stage's decoding forward (Stage::decode) over a cache of every block's keys and
// values.
#include "model/kv_decoder.hpp"

#include "core/error.hpp"

namespace gpt2 {

template <class T>
bool KvDecoder<T>::supports(const Stage<T>& stage) {
  const StageLayout& L = stage.layout();
  return L.has_embedding() && L.has_head() && L.tp().size == 1 && L.chunks().size() == 1 &&
         stage.precision() == Precision::fp32 && stage.params.extent(0) == L.local_size() && L.local_size() > 0;
}

// (A stage it cannot read fails before anything is allocated for it: the checks run in max_len's.)
template <class T>
KvDecoder<T>::KvDecoder(Stage<T>& stage, int max_len)
    : stage_(stage),
      max_len_(checked_length(stage, max_len)),
      kv_("kv_cache", size_t(stage.config().n_layer) * size_t(max_len_) * 2 * size_t(stage.config().n_embd)),
      scores_("kv_scores", size_t(stage.config().n_head) * size_t(max_len_) * size_t(max_len_)),
      logits_("kv_logits", size_t(stage.layout().local_vocab())),
      a_(stage.make_decoding(max_len_, max_len_, Vec<T>(kv_.data(), kv_.extent(0)),
                             Vec<T>(scores_.data(), scores_.extent(0)))) {}

template <class T>
int KvDecoder<T>::checked_length(const Stage<T>& stage, int max_len) {
  if (!supports(stage))
    fail("KvDecoder: the stage must hold the whole model on one rank, in its own buffers, without 16-bit GEMMs");
  const int n = max_len > 0 ? max_len : stage.seq_len();
  if (n > stage.config().block_size) fail("KvDecoder: ", n, " positions, more than block_size ", stage.config().block_size);
  return n;
}

template <class T>
Vec<T> KvDecoder<T>::append(const int* host_tokens, int n) {
  if (n <= 0 || len_ + n > max_len_) fail("KvDecoder::append: ", n, " tokens after ", len_, " of ", max_len_);
  const Vec<T> logits(logits_.data(), logits_.extent(0));
  stage_.decode(a_, host_tokens, n, len_, logits);
  len_ += n;
  rows_ += n;
  return logits;
}

template class KvDecoder<float>;
template class KvDecoder<double>;

}  // namespace gpt2
