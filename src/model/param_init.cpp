#include "model/param_init.hpp"

#include <cmath>

#include "tensor/math.hpp"

namespace gpt2 {

namespace {
KOKKOS_INLINE_FUNCTION uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element i of the standard normal stream `key`: the pair i / 2 gives two uniforms, Box-Muller
// turns them into two normals, i % 2 picks one.
KOKKOS_INLINE_FUNCTION double normal_at(uint64_t key, uint64_t i) {
  const uint64_t pair = key ^ ((i >> 1) + 1) * 0xD1B54A32D192ED03ull;
  const double u1 = double(mix(pair) >> 11) * 0x1.0p-53, u2 = double(mix(pair ^ 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
  const double r = km::sqrt(-2.0 * km::log(1.0 - u1)), a = 6.283185307179586 * u2;
  return (i & 1) ? r * km::sin(a) : r * km::cos(a);
}
}  // namespace

template <class T>
void init_params(const ParamLayout& global, const std::vector<TensorInfo>& tensors, uint64_t seed, Range window,
                 Vec<T> dst) {
  Kokkos::deep_copy(dst, T(0));  // device_sync-ok: initialisation, before any step
  const ModelConfig& c = global.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (const TensorInfo& t : tensors) {
    const size_t b = std::max(t.range.begin, window.begin), e = std::min(t.range.end, window.end);
    if (b >= e) continue;
    double stddev = 0.02, constant = 0;
    size_t valid = ~size_t(0);  // global elements below this are real (wte: not the padded rows)
    switch (t.kind) {
      case Param::wte: valid = size_t(c.vocab_size) * c.n_embd; break;  // padded rows stay zero
      case Param::attprojw:
      case Param::fcprojw: stddev = residual_std; break;
      case Param::ln1w:
      case Param::ln2w:
      case Param::lnfw: stddev = 0, constant = 1; break;
      case Param::wpe:
      case Param::qkvw:
      case Param::fcw: break;
      default: stddev = 0; break;  // biases
    }
    const uint64_t key = mix(seed ^ (0x9E3779B97F4A7C15ull * (global.index(t.kind, t.layer) + 1)));
    const GlobalMap g = t.global;
    const size_t tensor_begin = global.tensor(t.kind, t.layer).range.begin, first = t.range.begin;
    const size_t out = b - window.begin;
    Kokkos::parallel_for(
        "init_params", IndexRange(0, e - b), KOKKOS_LAMBDA(int64_t j) {
          const size_t gi = g.at(b - first + size_t(j));  // global flat index
          const size_t i = gi - tensor_begin;             // index within the global tensor
          const double v = stddev > 0 ? (gi < valid ? stddev * normal_at(key, i) : 0.0) : constant;
          dst(out + size_t(j)) = T(v);
        });
  }
  ExecSpace().fence();  // (set-up: the callers read the values next; the space's fence suffices)
}

template void init_params<float>(const ParamLayout&, const std::vector<TensorInfo>&, uint64_t, Range, Vec<float>);
template void init_params<double>(const ParamLayout&, const std::vector<TensorInfo>&, uint64_t, Range, Vec<double>);

}  // namespace gpt2
