#pragma once
// llm.c's GPT-2 model file, the interchange format for weights converted elsewhere:
// 256 x i32 header (magic 20240326, version, maxT, V, L, n_head, C, Vp) then fp32 tensors in llm.c's
// order, each holding all layers: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b,
// fcw, fcb, fcprojw, fcprojb, lnfw, lnfb. Version 3 has the padded vocabulary; version 1 (unpadded)
// is read too. Converted to / from our layer-major flat layout here.
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace gpt2 {

constexpr int32_t kLlmcModelMagic = 20240326;

struct LlmcModel {
  ModelConfig config;
  std::vector<float> params;  // our global layout (ParamLayout)
};

bool is_llmc_model(const std::string& path);
LlmcModel read_llmc_model(const std::string& path);  // InputError naming the file
// Writes version 3 atomically. params: our global layout.
void write_llmc_model(const std::string& path, const ModelConfig& c, const std::vector<float>& params);

}  // namespace gpt2
