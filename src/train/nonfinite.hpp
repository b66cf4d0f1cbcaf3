#pragma once
// A step whose loss or gradient norm is not finite: a diverging run (too high a learning rate, no
// clipping) shows it there first, as will an fp16 overflow under loss scaling. train.nonfinite picks
// what the step does: stop the run before anything saves that state, or skip the step's update.
#include <string>

#include "core/choice.hpp"

namespace gpt2 {

enum class NonFinitePolicy {
  stop,  // every rank stops after the step, saying which values were not finite; no checkpoint
  skip,  // no optimizer update for the step (moments untouched); step counter and lr move on
};

template <>
struct Words<NonFinitePolicy> {
  static inline const WordList list{"stop", "skip"};
};

// What of a step is not finite, e.g. "loss (nan) and gradient norm (inf)"; empty when all is.
std::string nonfinite_values(double loss, double grad_norm);

}  // namespace gpt2
