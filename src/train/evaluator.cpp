#include "train/evaluator.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "train/bleu.hpp"
#include "train/sampler.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

Evaluator::Evaluator(const RunConfig& cfg, const RankPasses& passes, const Topology& topo, TrainData& data,
                     LossSums& sums, Tracer& tracer, const TrainState& state, ModelGather& gather)
    : cfg_(cfg), passes_(passes), topo_(topo), data_(data), sums_(sums), tracer_(tracer), state_(state), gather_(gather),
      created_(now_s()) {
  const auto& t = cfg.train;
  if (t.bleu_pairs.empty()) return;
  tok_ = make_sample_tokenizer(cfg.data.tokenizer, cfg.model.vocab_size);
  pair_tokens_ = pair_tokens(*tok_, "data.tokenizer");
  if (pair_tokens_.separator >= cfg.model.vocab_size || pair_tokens_.end >= cfg.model.vocab_size)
    fail_input("train.bleu_pairs", "the ", tok_->name(), " tokenizer's separator and end tokens (",
               pair_tokens_.separator, ", ", pair_tokens_.end, ") are outside model.vocab_size (", cfg.model.vocab_size,
               ")");
  pairs_ = read_pairs(t.bleu_pairs).pairs;
  if (pairs_.empty()) fail_input("train.bleu_pairs", "\"", t.bleu_pairs, "\" holds no translation pair");
  if (t.bleu_examples > 0 && size_t(t.bleu_examples) < pairs_.size()) pairs_.resize(size_t(t.bleu_examples));
}

double Evaluator::validation_loss() {
  DataLoader* val = data_.val();
  if (!val) return -1;
  const int step = int(state_.step);
  Tracer::Scope scope(tracer_, EventKind::eval, step);
  const int batches = int(std::min<int64_t>(cfg_.train.eval_batches, val->batches_per_epoch()));
  const int m = cfg_.parallel.microbatches;
  double total = 0;
  for (int k = 0; k < batches; ++k) {
    const WaitContext context([step, k] {
      return "evaluation after step " + std::to_string(step) + ", validation batch " + std::to_string(k + 1);
    });
    PipelineExecutor::StepIO io;
    io.step = step;
    io.microbatch_size = passes_.microbatch_size;
    io.load = [&](int mb, Activations<float>& a) { data_.load_microbatch(*val, k, mb, topo_, a); };
    io.losses = sums_.token_losses();
    io.need_grad = false;
    passes_.exec.run(passes_.eval, io);
    sums_.reduce(m, false, step);
    total += sums_.read(val->counted_tokens(k), step).loss;
  }
  return batches > 0 ? total / batches : -1;
}

double Evaluator::bleu() {
  if (pairs_.empty()) return -1;
  const int64_t step = state_.step;
  const WaitContext context([step] { return "BLEU after step " + std::to_string(step); });
  Stage<float>* stage = gather_.whole_model_on_root();
  if (!stage) return -1;
  TranslateOptions o;
  o.max_tokens = cfg_.train.bleu_tokens;
  o.context = cfg_.data.seq_len;
  const std::vector<std::string> hyps = translate(*stage, *tok_, pair_tokens_, pairs_, o);
  std::vector<std::string> refs;
  for (const Pair& p : pairs_) refs.push_back(p.target);
  return corpus_bleu(hyps, {refs}).score;
}

std::optional<BleuReport> Evaluator::after_step(const StepMetrics& m, bool last) {
  train_s_ += m.step_ms / 1e3;
  tokens_ += double(cfg_.train.batch_size) * cfg_.data.seq_len;
  if (pairs_.empty()) return std::nullopt;
  const int every = cfg_.train.bleu_every;
  const int64_t step = state_.step, per_epoch = data_.train().batches_per_epoch();
  if (!(last || (every > 0 ? step % every == 0 : step % per_epoch == 0))) return std::nullopt;
  BleuReport r;
  const double t0 = now_s();
  r.score = bleu();
  r.seconds = now_s() - t0;
  r.epoch = double(step) / double(per_epoch);
  r.train_s = train_s_;
  r.tokens_per_s = train_s_ > 0 ? tokens_ / train_s_ : 0;
  r.elapsed_s = now_s() - created_;
  r.pairs = pairs_.size();
  train_s_ = 0, tokens_ = 0;
  return r;
}

}  // namespace gpt2
