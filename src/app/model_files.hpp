#pragma once
// Loading a whole model (config + global parameters) from our checkpoint or an llm.c model file,
// for the commands that work on one process (sample, convert, info).
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace gpt2::app {

struct LoadedModel {
  ModelConfig config;
  std::vector<float> params;  // global layout
  std::string format;         // "gpt2-kokkos checkpoint" | "llm.c model"
  int64_t step = -1;          // optimizer steps (our checkpoints)
  std::string config_toml;    // run configuration (our checkpoints)
};

// path may be a checkpoint folder (then its `latest`), our checkpoint, or an llm.c model file.
LoadedModel load_model(const std::string& path, bool verify = true);

}  // namespace gpt2::app
