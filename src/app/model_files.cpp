#include "app/model_files.hpp"

#include "core/error.hpp"
#include "core/fs.hpp"
#include "model/checkpoint.hpp"
#include "model/llmc_io.hpp"
#include "model/param_layout.hpp"

namespace gpt2::app {

LoadedModel load_model(const std::string& path_in, bool verify) {
  std::string path = path_in;
  if (is_directory(path)) {
    const std::string latest = path + "/latest";
    if (!file_exists(latest)) fail_input(path, "is a folder without a `latest` checkpoint pointer");
    std::string name = read_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    path += "/" + name;
  } else if (!file_exists(path)) {
    fail_input(path, "no such checkpoint or model file");
  }
  LoadedModel m;
  if (is_llmc_model(path)) {
    LlmcModel l = read_llmc_model(path);
    m.config = l.config, m.params = std::move(l.params), m.format = "llm.c model";
    return m;
  }
  if (!is_native_checkpoint(path))
    fail_input(path, "is neither a gpt2-kokkos checkpoint nor an llm.c model file (bad magic)");
  CheckpointReader r(path);
  if (verify) r.verify();
  m.config = r.meta().model;
  m.config.validate();
  m.step = r.meta().step;
  m.config_toml = r.meta().config_toml;
  m.format = "gpt2-kokkos checkpoint";
  m.params.resize(ParamLayout(m.config).total());
  r.read("params", 0, m.params.size(), m.params.data());
  return m;
}

}  // namespace gpt2::app
