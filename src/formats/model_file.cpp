#include "formats/model_file.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "formats/checkpoint_dir.hpp"
#include "model/param_layout.hpp"

namespace gpt2 {

ModelFile::ModelFile(const std::string& path, const std::string& key) : path_(path) {
  if (is_directory(path)) {
    path_ = latest_checkpoint(path);
    if (path_.empty()) fail_input(key, path, " is a folder without a `latest` checkpoint pointer");
  }
  if (!file_exists(path_)) fail_input(key, "no such checkpoint or model file: ", path_);
  if (is_llmc_model(path_)) {
    llmc_ = std::make_unique<LlmcModel>(read_llmc_model(path_));
    meta_.model = llmc_->config;
    meta_.step = -1;
    return;
  }
  if (is_h5_checkpoint(path_)) {
    h5_ = std::make_unique<H5CheckpointReader>(path_);
    meta_ = h5_->meta();
    return;
  }
  if (!is_native_checkpoint(path_))
    fail_input(path_, "is neither a gpt2-kokkos checkpoint nor an llm.c model file (bad magic)");
  ckpt_ = std::make_unique<CheckpointReader>(path_);
  meta_ = ckpt_->meta();
  // Readers allocate for the shape the file claims: it must be valid and match the parameters held.
  try {
    meta_.model.validate();
  } catch (const InputError& e) {
    fail_input(path_, "corrupt checkpoint: invalid model shape (", e.what(), ")");
  }
  const double want = meta_.model.param_count() * sizeof(float);
  if (ckpt_->has("params") && double(ckpt_->bytes("params")) != want)
    fail_input(path_, "corrupt checkpoint: section params holds ", ckpt_->bytes("params"), " bytes, the model ",
               "shape (", meta_.model.describe(), ") needs ", want < 1e15 ? std::to_string(uint64_t(want)) : std::to_string(want));
}

ModelFile::~ModelFile() = default;

bool ModelFile::has(const std::string& section) const {
  return h5_ ? h5_->has(section) : ckpt_ ? ckpt_->has(section) : section == "params";
}

void ModelFile::read(const std::string& section, size_t begin, size_t n, float* dst) const {
  if (h5_) return h5_->read(section, begin, n, dst);
  if (ckpt_) return ckpt_->read(section, begin, n, dst);
  if (section != "params") fail_input(path_, "an llm.c model file holds no ", section);
  if (begin > llmc_->params.size() || n > llmc_->params.size() - begin)
    fail_input(path_, "holds fewer parameters than the model needs");
  std::copy(llmc_->params.begin() + long(begin), llmc_->params.begin() + long(begin + n), dst);
}

void ModelFile::verify() const {
  if (h5_) h5_->verify();
  if (ckpt_) ckpt_->verify();
}

std::vector<float> ModelFile::read_all(const std::string& section) const {
  config().validate();
  std::vector<float> out(ParamLayout(config()).total());
  read(section, 0, out.size(), out.data());
  return out;
}

}  // namespace gpt2
