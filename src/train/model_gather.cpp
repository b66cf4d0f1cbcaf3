#include "train/model_gather.hpp"

namespace gpt2 {

namespace {
constexpr int kTagParams = 900;
}  // namespace

// Every rank hands in its local values of the section (collective over dp x cp when sharded); the
// ranks of dp replica 0 (cp rank 0) send theirs to world rank 0, which puts each tensor in its
// global place.
std::vector<float> ModelGather::section(const std::string& name) {
  const Topology& topo = rank_.topo;
  const std::vector<float> mine = rank_.store.local_values(name);
  std::vector<float> out;
  if (topo.dp_rank() != 0 || topo.cp_rank() != 0) return out;  // (the cp ranks hold the same)
  Communicator& world = *rank_.groups.world;
  if (world.rank() != 0) {
    world.host_send(mine.data(), mine.size() * sizeof(float), 0, kTagParams);
    return out;
  }
  out.assign(rank_.plan.model->total(), 0.0f);
  local_to_global(rank_.local(), mine.data(), out.data());
  std::vector<float> theirs;
  for (int r = 1; r < topo.world_size(); ++r) {
    const GridCoords c = Topology::coords_of(topo.shape(), r);
    if (c.dp != 0 || c.cp != 0) continue;
    const StageLayout L = rank_.plan.layout_of(c);
    theirs.resize(L.local_size());
    world.host_recv(theirs.data(), theirs.size() * sizeof(float), r, kTagParams);
    local_to_global(L, theirs.data(), out.data());
  }
  return out;
}

Stage<float>* ModelGather::whole_model_on_root() {
  const std::vector<float> whole = params();
  if (!rank_.root()) return nullptr;
  if (!whole_)
    whole_ = std::make_unique<Stage<float>>(StageLayout(*rank_.plan.model, 0, cfg_.model.n_layer), 1, cfg_.data.seq_len);
  Kokkos::deep_copy(whole_->params, Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(  // device_sync-ok: sampling and BLEU, between steps
                                        whole.data(), whole.size()));
  return whole_.get();
}

Stage<float>* ModelGather::sampling_model() {
  // ZeRO-3, tensor or context parallelism or a rank with several chunks: the whole model gathered
  // (every rank helps) on rank 0.
  if (rank_.store.policy().params || rank_.topo.tp() > 1 || rank_.topo.cp() > 1 || rank_.chunks.size() > 1)
    return whole_model_on_root();
  return rank_.root() ? rank_.chunks.front().get() : nullptr;
}

}  // namespace gpt2
