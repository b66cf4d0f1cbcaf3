#include "train/train_data.hpp"

namespace gpt2 {

TrainData::TrainData(const RunConfig& cfg)
    : cfg_(cfg), mb_size_(cfg.microbatch_size()) {
  const auto& d = cfg.data;
  const int V = cfg.model.vocab_size;
  train_set_ = std::make_unique<TokenDataset>(d.train, "data.train", d.seq_len, V);
  train_loader_ = std::make_unique<DataLoader>(*train_set_, cfg.train.batch_size, d.shuffle,
                                               uint64_t(cfg.train.seed), "data.train");
  if (!d.val.empty()) {
    val_set_ = std::make_unique<TokenDataset>(d.val, "data.val", d.seq_len, V);
    val_loader_ = std::make_unique<DataLoader>(*val_set_, cfg.train.batch_size, false, 0, "data.val");
  }
  docs_ = cfg.document_masks();
  if (docs_) {
    train_set_->mark_documents(d.document_mask ? d.eot_token : -1);
    if (val_set_) val_set_->mark_documents(d.document_mask ? d.eot_token : -1);
  }
  const size_t N = size_t(mb_size_) * d.seq_len;
  // A microbatch's region: inputs, targets, the tokens' groups; with document masks the rows'
  // document starts and positions and the positions' groups.
  region_ = (docs_ ? 2 : 1) * (2 * N + TokenGroups::table_size(int(N)));
  staging_ = PinnedBuffer<int>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "microbatch_staging"),
                               region_ * size_t(cfg.parallel.microbatches));
}

// The microbatch's sequences of this dp rank; with context parallelism, this rank's tokens of each
// (its chunks i and 2cp-1-i: the Stage's local rows).
void TrainData::load_microbatch(DataLoader& loader, int64_t batch, int mb, const Topology& topo, Activations<float>& a) {
  const int64_t row0 = int64_t(topo.dp_rank()) * (cfg_.train.batch_size / cfg_.parallel.dp) + int64_t(mb) * mb_size_;
  const size_t N = size_t(mb_size_) * cfg_.data.seq_len;
  int* const in = staging_.data() + region_ * size_t(mb % cfg_.parallel.microbatches);
  int* const tg = in + N;
  int* const starts = docs_ ? tg + N + TokenGroups::table_size(int(N)) : nullptr;
  int* const pos = docs_ ? starts + N : nullptr;
  loader.load(batch, row0, mb_size_, in, tg, starts);
  const int T = cfg_.data.seq_len;
  if (docs_)
    for (size_t r = 0; r < N; ++r) pos[r] = int(r % size_t(T)) - starts[r];
  const int cp = topo.cp();
  if (cp > 1) {
    const int Tl = T / cp, L = Tl / 2, i = topo.cp_rank();
    // In place: local row (b, j) comes from a position at or after it, b * T + t >= b * Tl + j, and
    // rows are taken in increasing order (chunk i, then chunk 2cp-1-i >= i), so no source is
    // overwritten before it is read.
    for (int b = 0; b < mb_size_; ++b)
      for (int j = 0; j < Tl; ++j) {
        const int t = j < L ? i * L + j : (2 * cp - 1 - i) * L + (j - L);
        for (int* v : {in, tg, starts, pos})
          if (v) v[size_t(b) * Tl + j] = v[size_t(b) * T + t];
      }
  }
  a.load(in, tg, tg + N);
  if (docs_) a.load_documents(starts, pos, pos + N);
}

}  // namespace gpt2
