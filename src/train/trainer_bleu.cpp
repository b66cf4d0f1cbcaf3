// Trainer: corpus BLEU of a held-out pairs file during training (train.bleu_pairs), after each
// epoch or every train.bleu_every steps, beside the training time and tokens/s since the last one.
#include <chrono>
#include <cstdio>

#include "train/bleu.hpp"
#include "train/sampler.hpp"
#include "train/trainer.hpp"

namespace gpt2 {

void Trainer::setup_bleu() {
  created_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto& t = cfg_.train;
  if (t.bleu_pairs.empty()) return;
  bleu_tok_ = make_sample_tokenizer(cfg_.data.tokenizer, cfg_.model.vocab_size);
  bleu_pt_ = pair_tokens(*bleu_tok_, "data.tokenizer");
  if (bleu_pt_.separator >= cfg_.model.vocab_size || bleu_pt_.end >= cfg_.model.vocab_size)
    fail_input("train.bleu_pairs", "the ", bleu_tok_->name(), " tokenizer's separator and end tokens (", bleu_pt_.separator,
               ", ", bleu_pt_.end, ") are outside model.vocab_size (", cfg_.model.vocab_size, ")");
  bleu_pairs_ = read_pairs(t.bleu_pairs).pairs;
  if (bleu_pairs_.empty()) fail_input("train.bleu_pairs", "\"", t.bleu_pairs, "\" holds no translation pair");
  if (t.bleu_examples > 0 && size_t(t.bleu_examples) < bleu_pairs_.size()) bleu_pairs_.resize(size_t(t.bleu_examples));
}

Stage<float>* Trainer::root_whole_model() {
  // Gathered on rank 0 (every rank helps) into a one-stage copy with its own buffers (what the KV
  // cache reads), whatever the layout.
  const std::vector<float> whole = gather_params();
  if (rank_ != 0) return nullptr;
  if (!sample_stage_)
    sample_stage_ = std::make_unique<Stage<float>>(StageLayout(*layout_, 0, cfg_.model.n_layer), 1, cfg_.data.seq_len);
  Kokkos::deep_copy(sample_stage_->params, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(  // device_sync-ok: BLEU, between steps
                                               whole.data(), whole.size()));
  return sample_stage_.get();
}

double Trainer::bleu() {
  if (bleu_pairs_.empty()) return -1;
  const WaitContext context([this] { return "BLEU after step " + std::to_string(step_); });
  Stage<float>* stage = root_whole_model();
  if (!stage) return -1;
  TranslateOptions o;
  o.max_tokens = cfg_.train.bleu_tokens;
  o.context = cfg_.data.seq_len;
  const std::vector<std::string> hyps = translate(*stage, *bleu_tok_, bleu_pt_, bleu_pairs_, o);
  std::vector<std::string> refs;
  for (const Pair& p : bleu_pairs_) refs.push_back(p.target);
  return corpus_bleu(hyps, {refs}).score;
}

void Trainer::maybe_bleu(const StepMetrics& m, bool last) {
  bleu_train_s_ += m.step_ms / 1e3;
  bleu_tokens_ += double(cfg_.train.batch_size) * cfg_.data.seq_len;
  if (bleu_pairs_.empty()) return;
  const int every = cfg_.train.bleu_every;
  const int64_t per_epoch = train_loader_->batches_per_epoch();
  if (!(last || (every > 0 ? step_ % every == 0 : step_ % per_epoch == 0))) return;
  const auto t0 = std::chrono::steady_clock::now();
  const double score = bleu();
  const double bleu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank_ == 0) {
    const double epoch = double(step_) / double(per_epoch), tok_s = bleu_train_s_ > 0 ? bleu_tokens_ / bleu_train_s_ : 0;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - created_;
    if (log_) log_->bleu(int(step_), epoch, score, bleu_train_s_, tok_s, elapsed);
    if (!opts_.quiet) {
      std::printf("epoch %.4g | step %lld | BLEU %.2f | training %.2f s, %.0f tok/s since the last | %zu pairs "
                  "translated in %.2f s | elapsed %s\n",
                  epoch, (long long)step_, score, bleu_train_s_, tok_s, bleu_pairs_.size(), bleu_s,
                  format_duration(elapsed).c_str());
      std::fflush(stdout);
    }
  }
  bleu_train_s_ = 0, bleu_tokens_ = 0;
}

}  // namespace gpt2
