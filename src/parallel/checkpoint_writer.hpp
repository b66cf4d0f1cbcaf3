#pragma once
// Writes an HDF5 checkpoint (model/checkpoint_h5.hpp) collectively: every rank of `world` calls it
// with its stage's local layout and what it holds of each section (ParamStore::owned_values): its
// ZeRO pieces of sharded state, the whole local state where dp replica 0 writes it -- tp rank 0 for
// tp-replicated tensors, stage 0 for wte (the last stage's tied copy is left out). Each writes its
// own parts of each tensor's global dataset with collective MPI-IO; nothing is gathered. The
// checksums are summed over the ranks. The file is written to `path` as given (the caller renames).
#include <functional>
#include <string>
#include <vector>

#include "model/checkpoint.hpp"
#include "model/stage_layout.hpp"
#include "parallel/param_store.hpp"
#include "runtime/communicator.hpp"

namespace gpt2 {

// owned(section): what this rank holds of a section (called on every rank, in order); replica_0:
// this rank is in dp replica 0. WriteError naming the file when a write fails.
void write_h5_checkpoint(const std::string& path, Communicator& world, const CheckpointMeta& meta,
                         const StageLayout& layout, bool replica_0, const std::vector<std::string>& sections,
                         const std::function<ParamStore::Owned(const std::string&)>& owned);

}  // namespace gpt2
