#include "train/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace gpt2 {

namespace {
class IdTokenizer final : public Tokenizer {
 public:
  explicit IdTokenizer(int v) : v_(v) {}
  std::string name() const override { return "ids"; }
  int vocab_size() const override { return v_; }
  int eot() const override { return -1; }
  std::vector<int> encode(std::string_view text, const std::string& source) const override {
    fail_input(source, "no tokenizer fits vocab_size ", v_, ": set data.tokenizer");
  }
  std::string decode(const std::vector<int>& ids) const override {
    std::string s;
    for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
    return s;
  }

 private:
  int v_;
};

int draw(std::vector<float>& logits, const SampleOptions& o, Rng& rng) {
  const int V = int(logits.size());
  if (o.temperature <= 0) return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int> idx(V);
  for (int i = 0; i < V; ++i) idx[i] = i;
  int k = o.top_k > 0 && o.top_k < V ? o.top_k : V;
  if (k < V)
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
  float mx = -INFINITY;
  for (int i = 0; i < k; ++i) mx = std::max(mx, logits[idx[i]]);
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / o.temperature);
  double u = rng.uniform() * sum;
  for (int i = 0; i < k; ++i)
    if ((u -= p[i]) <= 0) return idx[i];
  return idx[k - 1];
}

// The real vocabulary's logits of a device row, on the host.
template <class Row>
std::vector<float> host_logits(const Row& row, int V) {
  using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  std::vector<float> out(static_cast<size_t>(V));
  Kokkos::deep_copy(HostFloats(out.data(), size_t(V)), Kokkos::subview(row, Kokkos::make_pair(0, V)));  // device_sync-ok: sampling: the host reads the logits
  return out;
}
}  // namespace

std::vector<int> generate(Stage<float>& stage, const std::vector<int>& prompt, const SampleOptions& o,
                          Rng& rng) {
  const StageLayout& L = stage.layout();
  if (!L.has_embedding() || !L.has_head()) fail("generate: the stage must hold the whole model");
  if (o.kv_cache && KvDecoder<float>::supports(stage)) {  // (else: parameters in a store, see the header)
    KvDecoder<float> decoder(stage);
    return generate(decoder, prompt, o, rng);
  }
  const int T = stage.seq_len(), V = stage.config().vocab_size;
  Activations<float> a = stage.make_activations(1);
  Buffer<float> losses("sample_losses", size_t(T));
  std::vector<int> seq = prompt, out;
  if (seq.empty()) seq.push_back(0);
  std::vector<int> window(T, 0);
  using HostInts = Kokkos::View<int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  Kokkos::deep_copy(a.targets, 0);  // device_sync-ok: sampling, between steps
  for (int i = 0; i < o.tokens; ++i) {
    const int n = std::min<int>(int(seq.size()), T);
    std::fill(window.begin(), window.end(), 0);
    std::copy(seq.end() - n, seq.end(), window.begin());
    Kokkos::deep_copy(a.tokens, HostInts(window.data(), window.size()));  // device_sync-ok: sampling
    stage.forward(a, Vec<float>(losses.data(), size_t(T)), false, 0.0f);
    auto logits = stage.logits(1);
    std::vector<float> real = host_logits(Kokkos::subview(logits, n - 1, Kokkos::ALL), V);
    const int next = draw(real, o, rng);
    if (next == o.stop) break;
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::vector<int> generate(KvDecoder<float>& decoder, const std::vector<int>& prompt, const SampleOptions& o,
                          Rng& rng) {
  const int T = decoder.capacity(), V = decoder.config().vocab_size;
  std::vector<int> seq = prompt, out;
  if (seq.empty()) seq.push_back(0);
  // The window (the last T tokens) from position 0: the whole prompt at once, then token by token
  // while the sequence fits; once it is longer than T the window slides and runs again, as above.
  auto run_window = [&]() {
    const int n = std::min<int>(int(seq.size()), T);
    decoder.reset();
    return decoder.append(seq.data() + seq.size() - size_t(n), n);
  };
  Vec<float> logits = run_window();
  for (int i = 0; i < o.tokens; ++i) {
    std::vector<float> real = host_logits(logits, V);
    const int next = draw(real, o, rng);
    if (next == o.stop) break;
    seq.push_back(next);
    out.push_back(next);
    if (i + 1 == o.tokens) break;  // (no logits needed after the last)
    logits = decoder.length() < T ? decoder.append(&next, 1) : run_window();
  }
  return out;
}

std::unique_ptr<Tokenizer> make_sample_tokenizer(const std::string& name, int vocab_size) {
  std::string n = name;
  if (n == "auto") n = vocab_size <= 256 ? "byte" : vocab_size == 50257 ? "gpt2" : "";
  if (n.empty()) return std::make_unique<IdTokenizer>(vocab_size);
  try {
    return make_tokenizer(n);
  } catch (const InputError&) {
    if (name != "auto") throw;
    return std::make_unique<IdTokenizer>(vocab_size);
  }
}

}  // namespace gpt2
