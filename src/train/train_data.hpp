#pragma once
// The run's token data: the training and validation sets (data.train, data.val), their loaders,
// and the microbatch a rank feeds its first stage -- its dp slice of the global batch and, with
// context parallelism, its share of each sequence.
#include <memory>
#include <vector>

#include "data/loader.hpp"
#include "model/stage.hpp"
#include "runtime/topology.hpp"
#include "train/run_config.hpp"

namespace gpt2 {

class TrainData {
 public:
  explicit TrainData(const RunConfig& cfg);  // InputError naming data.train / data.val
  DataLoader& train() { return *train_loader_; }
  DataLoader* val() { return val_loader_.get(); }  // null without data.val
  int64_t train_tokens() const { return int64_t(train_set_->num_tokens()); }
  // Microbatch mb of global batch `batch` of this rank (at topo's coordinates) into a's inputs and targets.
  void load_microbatch(DataLoader& loader, int64_t batch, int mb, const Topology& topo, Activations<float>& a);

 private:
  const RunConfig& cfg_;
  int mb_size_;  // sequences per microbatch on a rank
  std::unique_ptr<TokenDataset> train_set_, val_set_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  // The microbatches' host data in page-locked memory, a region each (inputs, targets, the tokens'
  // groups): a region is not written again before the step's whole-device wait, so the host never
  // waits for the copies from it.
  PinnedBuffer<int> staging_;
  size_t region_ = 0;
  bool docs_ = false;  // document masks: each microbatch also carries its rows' documents
};

}  // namespace gpt2
