#pragma once
// Splits GPT-2's blocks into pp contiguous stages of about equal cost. The embedding goes with the
// first stage and the final LayerNorm + LM head (2 * C * Vp flops per token, several blocks' worth
// at GPT-2's vocabulary) with the last, so the last stage usually gets fewer blocks.
#include <vector>

#include "model/model_config.hpp"

namespace gpt2 {

// Relative forward cost per token of one block and of the LM head at sequence length T.
double block_cost(const ModelConfig& c, int seq_len);
double head_cost(const ModelConfig& c);

// Blocks per stage (sums to n_layer, each >= 1). `explicit_layers`, when not empty, is returned
// as it is (validated by the config). Minimises the most expensive stage.
std::vector<int> partition_stages(const ModelConfig& c, int pp, int seq_len,
                                  const std::vector<int>& explicit_layers = {});

}  // namespace gpt2
