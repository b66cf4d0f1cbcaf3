#pragma once
// Checkpoints: what a run starts from (a fresh init, checkpoint.resume's newest checkpoint that
// verifies, checkpoint.init_from's weights) and what it writes (checkpoint.dir, every
// checkpoint.every steps and at the end; kept per checkpoint.keep). Files hold the global layout
// whatever the grid and ZeRO level that wrote them: each rank reads its own tensors. An HDF5
// checkpoint is written by every rank (its own part, parallel/checkpoint_writer), now or from a
// background thread (checkpoint.async); a binary one is assembled on world rank 0.
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.hpp"
#include "formats/checkpoint_dir.hpp"
#include "parallel/checkpoint_writer.hpp"
#include "train/model_gather.hpp"
#include "train/train_state.hpp"

namespace gpt2 {

class Checkpointer {
 public:
  // dir_lock: rank 0's hold on checkpoint.dir (null elsewhere, and without one).
  Checkpointer(const RunConfig& cfg, const RankValues& rank, Tracer& tracer, TrainState& state, ModelGather& gather,
               std::unique_ptr<CheckpointDirLock> dir_lock);
  ~Checkpointer();
  void load_initial_state();  // collective: the parameters, and with a resume the optimizer and state
  void save();                // collective; into checkpoint.dir (nothing without one)
  void poll();                // collective, after each step: finishes a background write that has ended
  void complete();            // collective: waits for the background write in flight and finishes it
  int64_t saved_step() const { return saved_step_; }  // of the last checkpoint written or loaded (-1: none)

 private:
  std::string pick_resume();  // rank 0; "" to start fresh
  void read(const std::string& path, const std::string& key, bool with_optimizer);
  CheckpointMeta meta() const;
  void save_bin(const std::string& path, const CheckpointMeta& meta, const std::vector<std::string>& sections);
  void save_h5(const std::string& path, const CheckpointMeta& meta, const std::vector<std::string>& sections);
  void publish(const std::string& path, int64_t step, const H5CheckpointWriter* h5 = nullptr);  // rank 0
  bool root() const { return rank_.root(); }

  const RunConfig& cfg_;
  RankValues rank_;
  Tracer& tracer_;
  TrainState& state_;
  ModelGather& gather_;
  std::unique_ptr<CheckpointDirLock> dir_lock_;
  int64_t saved_step_ = -1;
  std::unique_ptr<BackgroundCheckpoint> in_flight_;  // checkpoint.async: the write under way
  std::vector<ParamStore::Owned> staging_;           // and the copy it writes, kept for the next
};

}  // namespace gpt2
