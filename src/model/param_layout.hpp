#pragma once
// Where every GPT-2 tensor lives in the ONE flat parameter buffer. Layer-major: wte, wpe, then block
// 0's twelve tensors, block 1's, ..., then the final LayerNorm. A block, a pipeline stage, a gradient
// bucket and a checkpoint shard are therefore plain contiguous ranges. Gradients and optimizer moments
// use the same layout. (llm.c's file order, each tensor holding all layers, is only an interchange
// format: see formats/llmc_io.)
#include <cstddef>
#include <string>
#include <vector>

#include <Kokkos_Macros.hpp>

#include "core/range.hpp"
#include "model/model_config.hpp"

namespace gpt2 {

enum class Param {
  wte, wpe,                                              // embeddings
  ln1w, ln1b, qkvw, qkvb, attprojw, attprojb,            // block: attention half
  ln2w, ln2b, fcw, fcb, fcprojw, fcprojb,                // block: MLP half
  lnfw, lnfb                                             // final LayerNorm
};
constexpr int kTensorsPerBlock = 12;

// Where the elements of a tensor's (local) part sit in the global flat buffer: `count` runs of `len`
// elements, run i starting at begin + i * stride. A whole tensor is one run; a split of it (tensor
// parallelism) is a block of rows (one run) or a block of columns of every row (one run per row).
struct GlobalMap {
  size_t begin = 0, len = 0, stride = 0, count = 1;
  KOKKOS_INLINE_FUNCTION size_t size() const { return len * count; }
  // The global index of local element i (device code calls it: parameter initialisation).
  KOKKOS_INLINE_FUNCTION size_t at(size_t i) const { return begin + (i / len) * stride + i % len; }
};

struct TensorInfo {
  Param kind;
  int layer;                  // block index, -1 outside blocks
  std::vector<size_t> shape;  // rows first; weights are (out, in)
  Range range;                // in the global flat buffer (in a local layout: the local buffer)
  bool decay;                 // weight decay applies: tensors of rank >= 2
  GlobalMap global;           // where its elements are in the global layout
  bool replicated = false;    // (local layouts) the whole tensor, the same on every tensor-parallel rank
  std::string name() const;   // "wte", "h.3.qkvw", "lnfw"
};

// A block's 2-D weight (qkv, attention projection, fc, fc projection): what Muon orthogonalises.
inline bool block_matrix(const TensorInfo& t) {
  return t.shape.size() == 2 && (t.kind == Param::qkvw || t.kind == Param::attprojw || t.kind == Param::fcw ||
                                 t.kind == Param::fcprojw);
}

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& tensor(Param kind, int layer = -1) const;
  size_t index(Param kind, int layer = -1) const;  // position in tensors()
  size_t total() const { return total_; }

  Range embeddings() const;      // wte + wpe
  Range block(int layer) const;  // one block's twelve tensors
  Range final_norm() const;      // lnfw + lnfb

 private:
  ModelConfig cfg_;
  std::vector<TensorInfo> tensors_;
  size_t total_ = 0;
};

const char* param_name(Param kind);

}  // namespace gpt2
