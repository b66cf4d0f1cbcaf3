#pragma once
// The one way a model is read from disk, for training (resume, init_from) and for the commands
// that work on a whole model (sample, convert, info): a checkpoint folder (the checkpoint its
// `latest` names), one of our checkpoints (binary or HDF5), or an llm.c model file. Float sections are read by
// range of the global flat layout, so each rank reads only the part it holds.
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.hpp"
#include "formats/checkpoint_h5.hpp"
#include "formats/llmc_io.hpp"

namespace gpt2 {

class ModelFile {
 public:
  // InputError naming `key` (the config key or flag that named the path) when there is nothing
  // there, and naming the file when it is neither format or is damaged.
  ModelFile(const std::string& path, const std::string& key);
  ~ModelFile();
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;

  const std::string& path() const { return path_; }  // the file itself (a folder resolved)
  bool native() const { return ckpt_ || h5_; }
  std::string format() const {
    return h5_ ? "gpt2-kokkos HDF5 checkpoint" : ckpt_ ? "gpt2-kokkos checkpoint" : "llm.c model";
  }
  const ModelConfig& config() const { return meta_.model; }
  // Step, sampling RNG, configuration and optimizer of our checkpoints (step -1 for llm.c files).
  const CheckpointMeta& meta() const { return meta_; }
  bool has(const std::string& section) const;       // "params", "opt.m", ...
  // Floats [begin, begin + n) of a section in the global layout.
  void read(const std::string& section, size_t begin, size_t n, float* dst) const;
  void verify() const;  // every checksum (our checkpoints; llm.c files have none)
  std::vector<float> read_all(const std::string& section = "params") const;

 private:
  std::string path_;
  CheckpointMeta meta_;
  std::unique_ptr<CheckpointReader> ckpt_;
  std::unique_ptr<H5CheckpointReader> h5_;
  std::unique_ptr<LlmcModel> llmc_;
};

}  // namespace gpt2
