#pragma once
// A model file's whole model as one stage (what gpt2 sample and gpt2 eval run): its parameters read
// and copied in, with room for seq_len positions (<= 0 or past block_size: block_size).
#include <memory>

#include "formats/model_file.hpp"
#include "model/stage.hpp"

namespace gpt2::app {

struct WholeModel {
  std::unique_ptr<ParamLayout> layout;  // (the stage's layout points at it)
  std::unique_ptr<Stage<float>> stage;
  int seq_len = 0;  // the positions it was made for
};
WholeModel load_whole_model(const ModelFile& file, int seq_len);

}  // namespace gpt2::app
