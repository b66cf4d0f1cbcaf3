#pragma once
// Dynamic loss scaling for fp16 (train.precision = "fp16"): the loss gradient is multiplied by the
// scale where backward starts, so that small gradients survive fp16's narrow range, and the
// gradients are divided by it again before the norm, clipping and the optimizer. A step whose
// gradient is not finite on any rank (an fp16 overflow; the ranks agree, the norm is all-reduced)
// skips its update and halves the scale; loss_scale_window clean steps in a row double it.
// Without fp16 the scale stays 1.
#include <cmath>
#include <cstdint>

namespace gpt2 {

class LossScale {
 public:
  LossScale() = default;
  LossScale(bool dynamic, double initial, int window)
      : dynamic_(dynamic), scale_(dynamic ? initial : 1.0), window_(window) {}
  bool dynamic() const { return dynamic_; }
  double scale() const { return scale_; }
  int64_t clean_steps() const { return clean_; }

  // After a step's gradients are known: overflow (non-finite) or clean.
  void update(bool overflow) {
    if (!dynamic_) return;
    if (overflow) {
      scale_ = std::max(scale_ / 2, kMin);
      clean_ = 0;
    } else if (++clean_ >= window_) {
      scale_ = std::min(scale_ * 2, kMax);
      clean_ = 0;
    }
  }
  // A checkpoint's state (fp16 runs); a run in another precision keeps its own.
  void restore(double scale, int64_t clean) {
    if (!dynamic_ || !(scale > 0) || !std::isfinite(scale)) return;
    scale_ = scale, clean_ = clean;
  }

  static constexpr double kMin = 1.0 / (1 << 24), kMax = 1e30;  // the scale's bounds (fp32 range)

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t window_ = 1000, clean_ = 0;
};

}  // namespace gpt2
