#pragma once
// How well the model does on data it does not train on: the mean validation loss over
// train.eval_batches batches of data.val, and the corpus BLEU (0-100, sacreBLEU's) of greedy
// translations of train.bleu_pairs' sources, after each epoch or every train.bleu_every steps.
#include <memory>
#include <optional>
#include <vector>

#include "plugins/tokenizer.hpp"
#include "train/loss_sums.hpp"
#include "train/metrics.hpp"
#include "train/model_gather.hpp"
#include "train/train_data.hpp"
#include "train/train_state.hpp"
#include "train/translation.hpp"

namespace gpt2 {

// A BLEU evaluation, beside the training time and tokens/s of the steps since the last one.
struct BleuReport {
  double score = -1, epoch = 0, train_s = 0, tokens_per_s = 0, elapsed_s = 0, seconds = 0;
  size_t pairs = 0;
};

class Evaluator {
 public:
  // Reads train.bleu_pairs (every rank, so that errors agree).
  Evaluator(const RunConfig& cfg, const RankPasses& passes, const Topology& topo, TrainData& data, LossSums& sums,
            Tracer& tracer, const TrainState& state, ModelGather& gather);
  double validation_loss();  // collective; -1 without data.val
  double bleu();             // collective; on rank 0 (-1 on the others, and without pairs)
  // Collective, after each step: the BLEU evaluation due now, if any.
  std::optional<BleuReport> after_step(const StepMetrics& m, bool last);

 private:
  const RunConfig& cfg_;
  RankPasses passes_;    // the evaluation lists
  const Topology& topo_;  // which part of each batch the rank loads
  TrainData& data_;
  LossSums& sums_;
  Tracer& tracer_;
  const TrainState& state_;
  ModelGather& gather_;
  std::vector<Pair> pairs_;  // train.bleu_pairs (the first bleu_examples)
  std::unique_ptr<Tokenizer> tok_;
  PairTokens pair_tokens_;
  double train_s_ = 0, tokens_ = 0;  // the steps' time and tokens since the last BLEU
  double created_ = 0;               // steady clock (s) when this was made
};

}  // namespace gpt2
