#pragma once
// Small deterministic RNG (xoshiro256**, seeded by splitmix64). Its whole state is four integers, so
// it goes into checkpoints, and (seed, stream) gives independent reproducible streams: one per
// parameter tensor, one for data shuffling, one for sampling.
#include <array>
#include <cmath>
#include <cstdint>

namespace gpt2 {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) {
    uint64_t x = seed ^ (0x9E3779B97F4A7C15ull * (stream + 1));
    for (auto& s : s_) s = splitmix(x);
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)); }  // [0, n)
  double normal() {  // Box-Muller; the second value of each pair is kept for the next call
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }
  // The generator's state (a pending normal() spare is dropped: only init uses normal()).
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) {
    s_ = s;
    has_spare_ = false;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::array<uint64_t, 4> s_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace gpt2
