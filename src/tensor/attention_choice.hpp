#pragma once
// model.attention = "auto": fused (tensor/flash_attention.hpp) where it was measured faster than the
// materialised kernels (tensor/attention.hpp), both forward and backward in one run (bench notebook,
// "Fused attention on the host"): on the host from 512 tokens a sequence (Intel, 2026-11-28: 0.83x
// materialised's time at 512, 0.80x at 1024, 0.70x at 4096, 1.1-1.5x below 512; Zen 5 with the 8 x 32
// register tiles, 2026-12-03: 0.91x, 0.82x, 0.77x, 1.02x at 256, 1.56x at 64). On CUDA it has not
// been measured yet: materialised there until it is.
#include <Kokkos_Macros.hpp>

#include "core/choice.hpp"

namespace gpt2 {

// model.attention: automatic (fused where faster, below), fused, materialized.
enum class AttentionKernels { automatic, fused, materialized };
template <>
struct Words<AttentionKernels> {
  static inline const WordList list{"auto", "fused", "materialized"};
};

inline bool fused_attention_faster(int seq_len) {
#if defined(KOKKOS_ENABLE_CUDA)
  (void)seq_len;
  return false;
#else
  return seq_len >= 512;
#endif
}

}  // namespace gpt2
