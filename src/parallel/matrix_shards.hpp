#pragma once
// MatrixShards (plugins/optimizer.hpp) over a rank's replica group and its tp group. Where a matrix's
// values are: the shard plan (ShardLayout) gives rank q of D a few ranges of whole rows of a matrix
// ("held"), one after another in its shard (its run); tensor parallelism gives each tp rank
// a block of rows (column-parallel: qkv with the heads divided, fc) or of columns (row-parallel: the
// projections). The owner -- dealt by Newton-Schulz cost (deal_by_cost) among the replica ranks --
// receives each holder's run of the matrix as one message into a staging buffer and puts its ranges
// in place with one kernel over an index table (the way back: packed by the same table, one
// message a holder and matrix, received straight into the run), then, with tp, its
// tp peers (which own the same matrices) all-gather the slices: rows stack into a row permutation of
// the matrix, which the Newton-Schulz iteration maps to the same permutation of its image, so
// one-rank and tp runs agree; column blocks are interleaved into place. Every tp rank computes the
// gathered matrix (the products are not distributed); the replicas divide the matrices among them.
#include <cstdint>
#include <vector>

#include "plugins/optimizer.hpp"
#include "model/stage_layout.hpp"
#include "parallel/shard_layout.hpp"
#include "plugins/communicator.hpp"
#include "tensor/views.hpp"

namespace gpt2 {

class CommMatrixShards final : public MatrixShards {
 public:
  // shards: the optimizer buffer's layout over `replicas`; tp: the tensor-parallel group (size 1:
  // none). The block matrices of `layout`, in its order.
  CommMatrixShards(const StageLayout& layout, const ShardLayout& shards, Communicator& replicas, Communicator& tp);

  const std::vector<Matrix>& matrices() const override { return matrices_; }
  size_t owned_size() const override { return owned_size_; }
  void gather(const float* runs, float* owned) override;
  void scatter(const float* owned, float* runs) override;

 private:
  struct Parts {
    int owner = 0;
    size_t local = 0;                       // values of the rank's tp slice of the matrix
    size_t local_at = 0;                    // owned, D > 1 and tp > 1: where the slice is assembled
    bool columns = false;                   // tp splits its columns
    std::vector<std::vector<Range>> held;   // per replica rank: its ranges of the slice (offsets in it)
    std::vector<size_t> staged_at;          // owned, per replica rank: where its run is staged
  };
  void deal_out(const std::vector<double>& cost);
  void plan_staging();  // the staging buffer and its index table (D > 1)
  float* slice_of(size_t i, float* owned, float* runs);  // where an owned matrix's tp slice is assembled
  // Where the owned slices are: the owned matrices themselves without tp, else slices_.
  Vec<float> base(float* owned) const;
  // Between the owned slices (at `base`) and every rank's runs, both ways.
  void exchange(bool gather, Vec<float> base, float* runs);
  size_t slice_at(size_t i) const;  // where owned matrix i's slice is in `base`

  Communicator &replicas_, &tp_;
  int D_ = 1, me_ = 0;  // the ranks the buffer is sharded over, and this one
  std::vector<Matrix> matrices_;
  std::vector<Parts> parts_;
  size_t owned_size_ = 0;
  Buffer<float> slices_;   // D > 1 and tp > 1: the owned matrices' slices, assembled before the tp gather
  Buffer<float> stacked_;  // tp > 1: column-split matrices' gathered blocks, before interleaving
  std::vector<size_t> stacked_at_;
  Buffer<float> staged_;       // D > 1: the other holders' runs of the owned matrices, as they travel
  Buffer<int32_t> staged_to_;  // each staged value's place in `base`
};

}  // namespace gpt2
