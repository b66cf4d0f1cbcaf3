#pragma once
// The whole model on world rank 0, whatever the layout: each section (parameters, optimizer state)
// assembled in the global layout from dp replica 0's ranks, and a one-stage copy of the whole model
// that rank 0 samples and translates with. Collective: every rank hands in its part.
#include <memory>
#include <string>
#include <vector>

#include "train/rank_engine.hpp"

namespace gpt2 {

class ModelGather {
 public:
  ModelGather(const RankValues& rank, const RunConfig& cfg) : rank_(rank), cfg_(cfg) {}
  // The section in the global layout on world rank 0 (others: empty).
  std::vector<float> section(const std::string& name);
  std::vector<float> params() { return section("params"); }
  // Rank 0: a one-stage copy of the whole model with its own buffers (what the KV cache reads),
  // refreshed now; other ranks: null.
  Stage<float>* whole_model_on_root();
  // Collective, with one pipeline stage: the model to sample with on rank 0 (null on the others):
  // the rank's own chunk where it holds the whole model in its own buffers, else the whole model.
  Stage<float>* sampling_model();

 private:
  RankValues rank_;
  const RunConfig& cfg_;
  std::unique_ptr<Stage<float>> whole_;
};

}  // namespace gpt2
