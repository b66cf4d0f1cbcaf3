#pragma once
// What a run carries from step to step and a checkpoint keeps besides the parameters and optimizer
// state: the step count, the sampling generator, fp16's loss scale. The trainer's parts share it.
#include <cstdint>

#include "core/rng.hpp"
#include "train/loss_scale.hpp"

namespace gpt2 {

struct TrainState {
  int64_t step = 0;  // optimizer steps taken (the next is step + 1)
  Rng sample_rng;    // samples during training
  LossScale loss_scale;
};

}  // namespace gpt2
