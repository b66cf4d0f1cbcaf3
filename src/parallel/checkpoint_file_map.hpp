#pragma once
// Where the values a rank holds go in an HDF5 checkpoint (parallel/checkpoint_writer.hpp): per
// global tensor, the local part this rank writes (none for the tied copy of wte -- stage 0 writes wte
// -- nor off tp rank 0 for tp-replicated tensors), the elements the file stores (wte's padded rows
// are not), and, once the file exists, each dataset's offset in it. A tensor tp splits into short
// runs (a column slice of every row) is joined into whole rows on one rank of the tp group: the one
// with the fewest values to join so far (the same choice on every rank: the sizes are global).
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "model/stage_layout.hpp"
#include "parallel/param_store.hpp"

namespace gpt2 {

class CheckpointFileMap {
 public:
  struct Piece {       // a run of values that lies contiguous in the file
    uint64_t offset;   // bytes from the start of the file
    size_t value;      // index in the section's owned values
    size_t count;      // floats
    size_t dataset;    // section-major: section * tensors + tensor
    uint64_t element;  // the first value's index in its tensor (for the checksum)
    const float* joined = nullptr;  // the values, where the tp join holds them (else fetched)
  };

  // replica_0: this rank is in dp replica 0 (writes unsharded state); tp_size: its tp group's ranks
  // (1: no tensor is joined).
  CheckpointFileMap(const ModelConfig& model, const StageLayout& layout, bool replica_0, int tp_size);

  const std::vector<TensorInfo>& tensors() const { return global_; }  // the global layout's, in order
  const std::vector<size_t>& stored() const { return stored_; }       // per tensor: elements in the file
  size_t datasets(size_t sections) const { return sections * global_.size(); }
  void set_offsets(std::vector<uint64_t> offsets) { offsets_ = std::move(offsets); }  // per dataset
  int joiner(size_t dataset) const { return joiner_[dataset % global_.size()]; }     // its tp rank
  // This rank's pieces of a section (mine: what it holds, ParamStore::owned_ranges), of the tensors
  // the tp join takes (joinable) or of the others, in the file's order, neighbours merged.
  std::vector<Piece> pieces(size_t section, const ParamStore::Owned& mine, bool joinable = false) const;

 private:
  std::vector<TensorInfo> global_;
  std::vector<const TensorInfo*> local_;  // per global tensor: the local one this rank may write, or null
  std::vector<size_t> stored_;
  std::vector<uint64_t> offsets_;
  std::vector<char> joinable_;  // per global tensor: tp splits it into runs; joined on one rank
  std::vector<int> joiner_;     // per joinable tensor: the tp rank that joins it
  bool replica_0_;
};

// In the file's order: the disk sees one sequential stream per rank.
void sort_by_offset(std::vector<CheckpointFileMap::Piece>& ps);

}  // namespace gpt2
