#pragma once
// train.precision: what the GEMMs read and the saved activations are stored in. fp32 is everything
// in fp32; bf16 and fp16 keep fp32 master weights, gradients, optimizer state, LayerNorm statistics,
// softmax and the loss, and round GEMM inputs and the activations saved for them to 16 bits
// (fp32 accumulation). fp16 needs loss scaling (its range ends at 65504).
#include "core/choice.hpp"

namespace gpt2 {

enum class Precision { fp32, bf16, fp16 };
template <>
struct Words<Precision> {
  static inline const WordList list{"fp32", "bf16", "fp16"};
};
inline const char* precision_name(Precision p) { return word(p); }

// Where the deck offers 16 bits instead of fp32 for one kind of value: the gradients on the data-
// parallel wire (parallel.grad_reduce_dtype), the Newton-Schulz products' inputs (train.ns_dtype).
enum class ValueType { fp32, bf16 };
template <>
struct Words<ValueType> {
  static inline const WordList list{"fp32", "bf16"};
};

// ZeRO's parameter all-gather (parallel.param_gather_dtype): automatic sends the weight matrices
// as 16-bit values under bf16 / fp16; fp32 always sends fp32.
enum class GatherType { automatic, fp32 };
template <>
struct Words<GatherType> {
  static inline const WordList list{"auto", "fp32"};
};

}  // namespace gpt2
