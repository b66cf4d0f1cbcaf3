#include "train/loss_sums.hpp"

#include <algorithm>
#include <cmath>

#include "tensor/reduce.hpp"

namespace gpt2 {

LossSums::LossSums(const RankValues& rank, int microbatch_size, const RunConfig& cfg, Tracer& tracer)
    : store_(rank.store), head_(rank.local().has_head()), tracer_(tracer),
      microbatch_tokens_(size_t(microbatch_size) * (cfg.data.seq_len / rank.topo.cp())),
      sums_(std::make_unique<StepSums>(rank.groups)) {
  if (head_)
    losses_ = Buffer<float>("losses", size_t(cfg.parallel.microbatches) * microbatch_size * cfg.data.seq_len);
}

void LossSums::reduce(int microbatches_run, bool with_grad_norm, int step) {
  const size_t tokens = size_t(microbatches_run) * microbatch_tokens_;  // this rank's
  // Only the head stage has token losses; the others contribute 0 to the sum over stages.
  sum_of<float>(Vec<float>(losses_.data(), head_ ? tokens : 0), DeviceScalar(sums_->loss_sum()));
  if (with_grad_norm) store_.grad_sum_of_squares(DeviceScalar(sums_->squares()));
  Tracer::Scope t(tracer_, EventKind::scalar_sync, step);
  sums_->reduce(head_, with_grad_norm, store_.grads_sharded());
}

LossSums::Values LossSums::read(int64_t counted_tokens, int step) {
  StepSums::Values v;
  {
    Tracer::Scope t(tracer_, EventKind::scalar_sync, step);
    v = sums_->read();
  }
  Values s;
  s.loss = v.loss_sum / double(std::max<int64_t>(counted_tokens, 1));
  s.grad_norm = std::sqrt(v.squares);
  return s;
}

}  // namespace gpt2
