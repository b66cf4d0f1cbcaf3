#pragma once
// train.precision: what the GEMMs read and the saved activations are stored in. fp32 is everything
// in fp32; bf16 and fp16 keep fp32 master weights, gradients, optimizer state, LayerNorm statistics,
// softmax and the loss, and round GEMM inputs and the activations saved for them to 16 bits
// (fp32 accumulation). fp16 needs loss scaling (its range ends at 65504).
#include <string>

namespace gpt2 {

enum class Precision { fp32, bf16, fp16 };

inline const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}
// false for an unknown name (the caller reports it).
inline bool parse_precision(const std::string& s, Precision& out) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
    if (s == precision_name(p)) {
      out = p;
      return true;
    }
  return false;
}

}  // namespace gpt2
