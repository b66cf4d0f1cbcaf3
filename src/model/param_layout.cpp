#include "model/param_layout.hpp"

#include "core/error.hpp"

namespace gpt2 {

const char* param_name(Param kind) {
  static const char* names[] = {"wte",  "wpe",  "ln1w",     "ln1b",     "qkvw", "qkvb",
                                "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                "fcprojw", "fcprojb", "lnfw", "lnfb"};
  return names[int(kind)];
}

std::string TensorInfo::name() const {
  if (layer < 0) return param_name(kind);
  return "h." + std::to_string(layer) + "." + param_name(kind);
}

ParamLayout::ParamLayout(const ModelConfig& cfg) : cfg_(cfg) {
  const size_t C = cfg.n_embd, Vp = cfg.padded_vocab(), maxT = cfg.block_size;
  auto add = [&](Param kind, int layer, std::vector<size_t> shape) {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    const bool decay = shape.size() >= 2;
    tensors_.push_back({kind, layer, std::move(shape), {total_, total_ + n}, decay, {total_, n, n, 1}});
    total_ += n;
  };
  add(Param::wte, -1, {Vp, C});
  add(Param::wpe, -1, {maxT, C});
  for (int l = 0; l < cfg.n_layer; ++l) {
    add(Param::ln1w, l, {C});
    add(Param::ln1b, l, {C});
    add(Param::qkvw, l, {3 * C, C});
    add(Param::qkvb, l, {3 * C});
    add(Param::attprojw, l, {C, C});
    add(Param::attprojb, l, {C});
    add(Param::ln2w, l, {C});
    add(Param::ln2b, l, {C});
    add(Param::fcw, l, {4 * C, C});
    add(Param::fcb, l, {4 * C});
    add(Param::fcprojw, l, {C, 4 * C});
    add(Param::fcprojb, l, {C});
  }
  add(Param::lnfw, -1, {C});
  add(Param::lnfb, -1, {C});
}

size_t ParamLayout::index(Param kind, int layer) const {
  if (kind == Param::wte) return 0;
  if (kind == Param::wpe) return 1;
  if (kind == Param::lnfw) return tensors_.size() - 2;
  if (kind == Param::lnfb) return tensors_.size() - 1;
  if (layer < 0 || layer >= cfg_.n_layer) fail("ParamLayout: no block ", layer);
  return 2 + size_t(layer) * kTensorsPerBlock + (int(kind) - int(Param::ln1w));
}

const TensorInfo& ParamLayout::tensor(Param kind, int layer) const {
  return tensors_[index(kind, layer)];
}

Range ParamLayout::embeddings() const { return {0, tensors_[1].range.end}; }
Range ParamLayout::block(int layer) const {
  return {tensor(Param::ln1w, layer).range.begin, tensor(Param::fcprojb, layer).range.end};
}
Range ParamLayout::final_norm() const {
  return {tensor(Param::lnfw).range.begin, tensors_.back().range.end};
}

}  // namespace gpt2
