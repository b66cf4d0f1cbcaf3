#pragma once
// What the performance model knows about a machine, read from a hardware file (inputs/hardware/*.toml):
// one "device" is what one rank runs on (a GPU, or a CPU core on a CPU box). Every key is required;
// a missing one is an InputError naming the file and the key.
//   [device]   name, peak_tflops_fp32 / _tf32 / _bf16 (dense; 0 where the device has no such mode),
//              gemm_efficiency (fraction of peak large GEMMs reach; used without a calibration trace),
//              memory_gb, memory_bandwidth_gbs, memory_efficiency (fraction of the bandwidth
//              streaming kernels reach), kernel_overhead_us (fixed cost of one kernel launch)
//   [node]     devices_per_node, comm_overlap (0..1: share of communication that runs beside
//              compute: 1 with NCCL's own streams on GPUs, 0 where MPI progresses only inside the
//              rank's own calls), shared_slowdown (>= 1: how much slower a rank computes when every
//              device of its node is busy -- CPU cores share caches and memory bandwidth; 1 for GPUs)
//   [intra_node] / [inter_node]  bandwidth_gbs (per device, one direction, what a ring collective
//              reaches), latency_us (per message / per ring step); optional p2p_bandwidth_gbs,
//              p2p_latency_us (one point-to-point message; default: the collective figures)
// Optional keys of a device (GPU) file; a file without them (this box's) keeps one GEMM efficiency
// for every shape and no fixed cost per collective:
//   [device]   multiprocessors (SMs: GEMM tiles run in waves of this many), gemm_tile_m / gemm_tile_n
//              (the library's largest output tile, default 256 x 128), gemm_k_overhead (a tile's fixed
//              cost -- prologue, epilogue -- as extra K: a tile of depth K runs at K / (K + this) of
//              gemm_efficiency), flash_attention_efficiency (fraction of peak a fused attention kernel
//              reaches, for layouts priced with fused attention)
//   [node]     collective_latency_us (a collective's fixed cost beyond its ring or tree steps)
#include <string>

#include "tensor/precision.hpp"

namespace gpt2 {

struct Link {
  double bandwidth = 0;  // bytes/s per device, one direction
  double latency = 0;    // s per message or ring step
};

// The device's arithmetic: its peaks, how much of them GEMMs and fused attention reach, a launch.
struct DeviceCompute {
  double peak_fp32 = 0, peak_tf32 = 0, peak_bf16 = 0;  // FLOP/s, dense
  double gemm_efficiency = 0;
  // GEMM efficiency by shape (0 multiprocessors: gemm_efficiency for every GEMM).
  int multiprocessors = 0;
  int gemm_tile_m = 256, gemm_tile_n = 128;
  double gemm_k_overhead = 0;
  double flash_attention_efficiency = 0;  // 0: not given (fused attention priced as its GEMMs)
  double kernel_overhead = 0;             // s

  // Peak FLOP/s of the GEMMs at a precision (fp32: TF32 tensor cores where the device has them, as
  // train.tf32 does; bf16); 0 when the device lacks the precision.
  double peak(Precision precision) const;
  bool supports(Precision precision) const { return peak(precision) > 0; }
};

// The device's memory: its size, bandwidth and the share of it streaming kernels reach.
struct MemoryFigures {
  double memory_bytes = 0, memory_bandwidth = 0, memory_efficiency = 0;
};

// The node and the network: devices a node holds, what sharing it costs, the links between ranks.
struct Node {
  int devices_per_node = 1;
  double comm_overlap = 1;
  double shared_slowdown = 1;
  Link intra, inter;
  Link intra_p2p, inter_p2p;      // one point-to-point message (bandwidth 0: as the collectives)
  double collective_latency = 0;  // s per collective

  // The link a group of `size` ranks whose members are `stride` world ranks apart uses: inside one
  // node when it spans no more than a node (ranks are placed on nodes in order).
  const Link& link(int size, int stride) const;
  const Link& p2p_link(int stride) const;  // a message between ranks `stride` apart
};

struct Hardware : DeviceCompute, MemoryFigures, Node {
  std::string file, name;

  // InputError naming `path` (and the key) when unreadable, incomplete or out of range.
  static Hardware load(const std::string& path);
  // The folder of the project's hardware files (inputs/hardware of the source tree this was built
  // from), and the file there of the device a run has (its name, as Environment::device() says it):
  // an A100's, an H100's (H200s too), else this development box's.
  static std::string directory();
  static std::string file_for_device(const std::string& device);
};

}  // namespace gpt2
