#include "app/whole_model.hpp"

#include <algorithm>

namespace gpt2::app {

WholeModel load_whole_model(const ModelFile& file, int seq_len) {
  const ModelConfig& config = file.config();
  WholeModel m;
  m.seq_len = seq_len > 0 ? std::min(seq_len, config.block_size) : config.block_size;
  m.layout = std::make_unique<ParamLayout>(config);
  m.stage = std::make_unique<Stage<float>>(StageLayout(*m.layout, 0, config.n_layer), 1, m.seq_len);
  std::vector<float> params = file.read_all();
  Kokkos::deep_copy(m.stage->params, Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(  // device_sync-ok: set-up
                                         params.data(), params.size()));
  return m;
}

}  // namespace gpt2::app
