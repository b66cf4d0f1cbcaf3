// Trainer: printed samples during training and the per-rank summary at the end.
#include <cstdio>

#include "train/sampler.hpp"
#include "train/trainer.hpp"

namespace gpt2 {

void Trainer::maybe_sample() {
  const int every = cfg_.train.sample_every;
  if (every <= 0 || step_ % every != 0) return;
  const WaitContext context([this] { return "sampling after step " + std::to_string(step_); });
  if (topo_->pp() > 1) {
    static bool told = false;
    if (rank_ == 0 && !told) std::printf("(samples during training need parallel.pp = 1; use gpt2 sample)\n");
    told = true;
    return;
  }
  Stage<float>* stage = &this->stage();
  if (store_->policy().params || topo_->tp() > 1 || topo_->cp() > 1 || stages_.size() > 1) {
    // ZeRO-3, tensor or context parallelism or a rank with several chunks: gather the whole model
    // (every rank helps) on rank 0.
    const std::vector<float> whole = gather_params();
    if (rank_ != 0) return;
    if (!sample_stage_)
      sample_stage_ = std::make_unique<Stage<float>>(StageLayout(*layout_, 0, cfg_.model.n_layer), 1, cfg_.data.seq_len);
    Kokkos::deep_copy(sample_stage_->params, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(  // device_sync-ok: sampling, between steps
                                                 whole.data(), whole.size()));
    stage = sample_stage_.get();
  }
  if (rank_ != 0) return;
  std::unique_ptr<Tokenizer> tok = make_sample_tokenizer(cfg_.data.tokenizer, cfg_.model.vocab_size);
  const std::vector<int> prompt = {tok->eot() >= 0 ? tok->eot() : int('\n')};
  SampleOptions so;
  so.tokens = cfg_.train.sample_tokens;
  const std::vector<int> out = generate(*stage, prompt, so, sample_rng_);
  std::printf("--- sample at step %lld ---\n%s\n---\n", (long long)step_, tok->decode(out).c_str());
  std::fflush(stdout);
}

// Collective: every rank's throughput and memory, printed by rank 0.
void Trainer::print_summary(double step_s, double tok_s, double rank_tok_s) {
  struct RankStats {
    double step_s, tok_s, param_mib, grad_mib, opt_mib, act_mib, peak_mb;
  };
  const MemoryUse mem = memory();
  const RankStats mine{step_s, rank_tok_s, mem.params / 1048576.0, mem.grads / 1048576.0, mem.optimizer / 1048576.0,
                       activation_bytes() / 1048576.0, double(exec_->peak_slots())};
  const std::vector<RankStats> all = groups_->world->host_gather_all(mine);
  if (rank_ != 0 || opts_.quiet || step_s <= 0) return;
  std::printf("done: %lld steps | mean step %.1f ms | %.0f tok/s in all (sum over dp ranks) | time per epoch %s\n",
              (long long)step_, step_s * 1e3, tok_s,
              format_duration(step_s * train_loader_->batches_per_epoch()).c_str());
  for (int r = 0; r < size_ && r < 16; ++r) {
    const RankStats& s = all[size_t(r)];
    const GridCoords c = Topology::coords_of(topo_->shape(), r);
    std::printf("  rank %d (dp %d, stage %d%s): %.0f tok/s on its data, time per epoch %s | params %.1f MiB | "
                "grads %.1f MiB | optimizer %.1f MiB | peak activations %.1f MiB (%.0f microbatches)\n",
                r, c.dp, c.pp,
                ((topo_->cp() > 1 ? ", cp " + std::to_string(c.cp) : std::string()) +
                 (topo_->tp() > 1 ? ", tp " + std::to_string(c.tp) : std::string())).c_str(), s.tok_s,
                format_duration(s.step_s * train_loader_->batches_per_epoch()).c_str(), s.param_mib, s.grad_mib,
                s.opt_mib, s.act_mib, s.peak_mb);
  }
  if (size_ > 16) std::printf("  (%d more ranks)\n", size_ - 16);
  if (!history_.empty()) std::printf("final loss %.4f\n", history_.back().loss);
  std::fflush(stdout);
}

}  // namespace gpt2
