#include "model/model_config.hpp"

#include <sstream>

#include "core/error.hpp"

namespace gpt2 {

void ModelConfig::validate() const {
  auto positive = [](const char* key, int v) {
    if (v <= 0) fail_input(std::string("model.") + key, "must be a positive integer, got ", v);
  };
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_embd", n_embd);
  positive("vocab_size", vocab_size);
  positive("block_size", block_size);
  if (n_embd % n_head != 0)
    fail_input("model.n_embd", "must be divisible by model.n_head (", n_head, "), got ", n_embd);
  if (vocab_size > 65536)
    fail_input("model.vocab_size", "must be at most 65536 (tokens are stored as uint16), got ",
               vocab_size);
}

std::string ModelConfig::describe() const {
  std::ostringstream os;
  os << "n_layer=" << n_layer << " n_head=" << n_head << " n_embd=" << n_embd
     << " vocab_size=" << vocab_size << " block_size=" << block_size;
  return os.str();
}

std::string ModelConfig::diff(const ModelConfig& o) const {
  std::ostringstream os;
  auto cmp = [&](const char* k, int a, int b) {
    if (a != b) os << (os.tellp() > 0 ? ", " : "") << k << ": " << a << " vs " << b;
  };
  cmp("n_layer", n_layer, o.n_layer);
  cmp("n_head", n_head, o.n_head);
  cmp("n_embd", n_embd, o.n_embd);
  cmp("vocab_size", vocab_size, o.vocab_size);
  cmp("block_size", block_size, o.block_size);
  return os.str();
}

}  // namespace gpt2
