#include "perf/hardware.hpp"

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/input_deck.hpp"

namespace gpt2 {

double DeviceCompute::peak(Precision precision) const {
  switch (precision) {
    case Precision::fp32: return std::max(peak_fp32, peak_tf32);
    case Precision::bf16: return peak_bf16;
    case Precision::fp16: return 0;  // (no table gives it yet)
  }
  return 0;
}

const Link& Node::link(int size, int stride) const {
  const long long span = (long long)stride * (size - 1) + 1;
  return size <= 1 || span <= devices_per_node ? intra : inter;
}

const Link& Node::p2p_link(int stride) const {
  const Link& collective = link(2, stride);
  const Link& p2p = &collective == &intra ? intra_p2p : inter_p2p;
  return p2p.bandwidth > 0 ? p2p : collective;  // (unset in a Hardware built in code)
}

namespace {

// A hardware file's keys as read. Every key starts unset (NaN); what the file leaves unset is
// reported by name.
struct HardwareKeys {
  std::string name = "\x01";
  double peak32, peak_tf, peak16, gemm, mem_gb, bw, mem_eff, launch_us, overlap, intra_bw, intra_lat, inter_bw,
      inter_lat, per_node, shared, intra_p2p_bw, intra_p2p_lat, inter_p2p_bw, inter_p2p_lat, sms, tile_m, tile_n,
      k_overhead, flash, coll_lat;
  HardwareKeys() {
    const double unset = std::nan("");
    peak32 = peak_tf = peak16 = gemm = mem_gb = bw = mem_eff = launch_us = overlap = intra_bw = intra_lat = inter_bw =
        inter_lat = per_node = shared = intra_p2p_bw = intra_p2p_lat = inter_p2p_bw = inter_p2p_lat = sms = tile_m =
            tile_n = k_overhead = flash = coll_lat = unset;
  }
  HardwareKeys(const HardwareKeys&) = delete;  // fields() points into it

  std::vector<DeckField> fields() {
    return {
        {"device.name", &name, "what the file describes"},
        {"device.peak_tflops_fp32", &peak32, "dense FP32 TFLOP/s"},
        {"device.peak_tflops_tf32", &peak_tf, "dense TF32 tensor-core TFLOP/s (0: none)"},
        {"device.peak_tflops_bf16", &peak16, "dense BF16 TFLOP/s (0: none)"},
        {"device.gemm_efficiency", &gemm, "fraction of peak a large GEMM reaches"},
        {"device.memory_gb", &mem_gb, "device memory, GB (1e9 bytes)"},
        {"device.memory_bandwidth_gbs", &bw, "device memory bandwidth, GB/s"},
        {"device.memory_efficiency", &mem_eff, "fraction of the bandwidth streaming kernels reach"},
        {"device.kernel_overhead_us", &launch_us, "fixed cost of one kernel, microseconds"},
        {"node.devices_per_node", &per_node, "devices (ranks) per node"},
        {"node.comm_overlap", &overlap, "share of communication that runs beside compute (0..1)"},
        {"node.shared_slowdown", &shared, "compute time factor when every device of a node is busy (>= 1)"},
        {"intra_node.bandwidth_gbs", &intra_bw, "per device, one direction, GB/s"},
        {"intra_node.latency_us", &intra_lat, "per message or ring step, microseconds"},
        {"inter_node.bandwidth_gbs", &inter_bw, "per device, one direction, GB/s"},
        {"inter_node.latency_us", &inter_lat, "per message or ring step, microseconds"},
        // Optional (default: the collective figures above): one point-to-point message, as pipeline
        // sends and context parallelism's ring shifts move.
        {"intra_node.p2p_bandwidth_gbs", &intra_p2p_bw, "one message's bandwidth, GB/s (default: bandwidth_gbs)"},
        {"intra_node.p2p_latency_us", &intra_p2p_lat, "one message's latency, microseconds (default: latency_us)"},
        {"inter_node.p2p_bandwidth_gbs", &inter_p2p_bw, "one message's bandwidth, GB/s (default: bandwidth_gbs)"},
        {"inter_node.p2p_latency_us", &inter_p2p_lat, "one message's latency, microseconds (default: latency_us)"},
        // Optional: GEMM efficiency by shape and a collective's fixed cost (device files).
        {"device.multiprocessors", &sms, "streaming multiprocessors (GEMM tiles run in waves of this many)"},
        {"device.gemm_tile_m", &tile_m, "rows of the GEMM library's largest output tile (default 256)"},
        {"device.gemm_tile_n", &tile_n, "columns of the GEMM library's largest output tile (default 128)"},
        {"device.gemm_k_overhead", &k_overhead, "a GEMM tile's fixed cost as extra depth K (default 0)"},
        {"device.flash_attention_efficiency", &flash, "fraction of peak a fused attention kernel reaches"},
        {"node.collective_latency_us", &coll_lat, "a collective's fixed cost beyond its steps, microseconds"},
    };
  }
};

bool optional_key(const std::string& key) {
  return key.find(".p2p_") != std::string::npos || key == "device.multiprocessors" || key.find("device.gemm_tile") == 0 ||
         key == "device.gemm_k_overhead" || key == "device.flash_attention_efficiency" ||
         key == "node.collective_latency_us";
}

// Every key the file must give is there, and every number given is in its range.
void check_keys(const std::vector<DeckField>& fields, const HardwareKeys& k, const std::string& path) {
  for (const DeckField& f : fields) {
    const bool missing = f.key == "device.name" ? k.name == "\x01" : std::isnan(*std::get<double*>(f.dst));
    if (missing && !optional_key(f.key)) fail_input(path, "missing key ", f.key, " (", f.help, ")");
  }
  for (const DeckField& f : fields) {
    if (f.key == "device.name") continue;
    const double v = *std::get<double*>(f.dst);
    if (optional_key(f.key) && std::isnan(v)) continue;
    const bool may_be_zero = f.key == "device.peak_tflops_tf32" || f.key == "device.peak_tflops_bf16" ||
                             f.key == "device.kernel_overhead_us" || f.key == "node.comm_overlap" ||
                             f.key == "device.gemm_k_overhead" || f.key == "device.flash_attention_efficiency" ||
                             f.key.find("latency") != std::string::npos;
    if (!(v >= 0) || (!may_be_zero && v == 0) || !std::isfinite(v))
      fail_input(path, f.key, ": expected a ", may_be_zero ? "non-negative" : "positive", " number, got ", v);
  }
  for (double fraction : {k.gemm, k.mem_eff, k.overlap, std::isnan(k.flash) ? 0.0 : k.flash})
    if (fraction > 1) fail_input(path, "efficiencies and comm_overlap are fractions between 0 and 1, got ", fraction);
  if (k.shared < 1) fail_input(path, "node.shared_slowdown: expected a factor >= 1, got ", k.shared);
  if (k.per_node != std::floor(k.per_node) || k.per_node < 1)
    fail_input(path, "node.devices_per_node: expected a whole number >= 1, got ", k.per_node);
  for (const auto& [key, v] : {std::pair<const char*, double>{"device.multiprocessors", k.sms},
                               {"device.gemm_tile_m", k.tile_m}, {"device.gemm_tile_n", k.tile_n}})
    if (!std::isnan(v) && v != std::floor(v))
      fail_input(path, key, ": expected a whole number, got ", v);
}

// The keys in SI units; an optional key left unset takes its default.
Hardware hardware_of(const HardwareKeys& k, const std::string& path) {
  Hardware h;
  h.file = path, h.name = k.name;
  h.peak_fp32 = k.peak32 * 1e12, h.peak_tf32 = k.peak_tf * 1e12, h.peak_bf16 = k.peak16 * 1e12;
  h.gemm_efficiency = k.gemm;
  h.memory_bytes = k.mem_gb * 1e9, h.memory_bandwidth = k.bw * 1e9, h.memory_efficiency = k.mem_eff;
  h.kernel_overhead = k.launch_us * 1e-6;
  h.devices_per_node = int(k.per_node);
  h.comm_overlap = k.overlap;
  h.shared_slowdown = k.shared;
  h.intra = {k.intra_bw * 1e9, k.intra_lat * 1e-6};
  h.inter = {k.inter_bw * 1e9, k.inter_lat * 1e-6};
  auto or_else = [](double v, double fallback) { return std::isnan(v) ? fallback : v; };
  h.intra_p2p = {or_else(k.intra_p2p_bw, k.intra_bw) * 1e9, or_else(k.intra_p2p_lat, k.intra_lat) * 1e-6};
  h.inter_p2p = {or_else(k.inter_p2p_bw, k.inter_bw) * 1e9, or_else(k.inter_p2p_lat, k.inter_lat) * 1e-6};
  h.multiprocessors = int(or_else(k.sms, 0));
  h.gemm_tile_m = int(or_else(k.tile_m, 256)), h.gemm_tile_n = int(or_else(k.tile_n, 128));
  h.gemm_k_overhead = or_else(k.k_overhead, 0);
  h.flash_attention_efficiency = or_else(k.flash, 0);
  h.collective_latency = or_else(k.coll_lat, 0) * 1e-6;
  return h;
}

}  // namespace

Hardware Hardware::load(const std::string& path) {
  HardwareKeys keys;
  const std::vector<DeckField> fields = keys.fields();
  try {
    InputDeck::from_file(path).bind(fields);
  } catch (const InputError& e) {
    if (e.input() == path) throw;
    throw InputError(path, e.what());
  }
  check_keys(fields, keys, path);
  return hardware_of(keys, path);
}

std::string Hardware::directory() {
#ifdef GPT2_HARDWARE_DIR
  return GPT2_HARDWARE_DIR;
#else
  return "inputs/hardware";
#endif
}

std::string Hardware::file_for_device(const std::string& device) {
  const char* file = device.find("A100") != std::string::npos ? "a100.toml"
                     : device.find("H100") != std::string::npos || device.find("H200") != std::string::npos
                         ? "h100.toml"
                         : "devbox.toml";
  return directory() + "/" + file;
}

}  // namespace gpt2
