#include "perf/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace gpt2 {

namespace {
int unit_kind(int u, int n_layer) { return u == 0 ? 0 : u == n_layer + 1 ? 2 : 1; }
}  // namespace

CostModel::CostModel(const Workload& w, const Hardware& hw, const Calibration* cal) : w_(w), hw_(hw), cal_(cal) {
  static unsigned long long made = 0;
  serial_ = ++made;
  if (!cal_) return;
  // The traced run's shape: its microbatch, tp split and fp32.
  Layout at;
  at.tp = cal_->tp;
  at.sequence_parallel = cal_->sequence_parallel;
  const int units[3] = {0, 1, w_.model.n_layer + 1};
  const UnitTimes* measured[2] = {&cal_->forward, &cal_->backward};
  for (int k = 0; k < 3; ++k) {
    const UnitWork uw = unit_work(units[k], cal_->microbatch, at);
    const double model_f = modelled(uw.forward, Precision::fp32);
    const double model_b = modelled(uw.backward_input, Precision::fp32) + modelled(uw.backward_weight, Precision::fp32);
    // The measured time less its launches: the rest is the work the scale carries.
    const double launch[2] = {uw.forward.kernels * hw_.kernel_overhead,
                              (uw.backward_input.kernels + uw.backward_weight.kernels) * hw_.kernel_overhead};
    const double got[2] = {k == 0 ? measured[0]->embedding : k == 1 ? measured[0]->block : measured[0]->head,
                           k == 0 ? measured[1]->embedding : k == 1 ? measured[1]->block : measured[1]->head};
    const double want[2] = {model_f, model_b};
    for (int ph = 0; ph < 2; ++ph)
      if (got[ph] > launch[ph] && want[ph] > 0) scale_[k][ph] = (got[ph] - launch[ph]) / want[ph];
  }
}

double CostModel::scale(int u, int phase) const { return scale_[unit_kind(u, w_.model.n_layer)][phase]; }

UnitWork CostModel::unit_work(int u, int b, const Layout& l) const {
  const ModelConfig& m = w_.model;
  // N: the rank's rows (context parallelism: T / cp of each sequence, whose queries see keys over the
  // whole sequence, T, through the ring).
  const double t = l.tp, T = w_.seq_len, N = double(b) * T / l.cp, C = m.n_embd, nh = m.n_head;
  const double V = double(m.padded_vocab()) / t;
  const double R = l.sequence_parallel ? N / t : N;  // rows of the residual stream on this rank
  const double bytes = l.bytes_per_value();
  UnitWork w;
  const int kind = unit_kind(u, m.n_layer);
  if (kind == 1) {
    // Four GEMMs with 12 C^2 weights (qkv, the attention projection, fc, its projection: column-,
    // row-, column-, row-parallel); their input gradients and weight gradients in the backward.
    const double out[4] = {3 * C / t, C, 4 * C / t, C}, in[4] = {C, C / t, C, 4 * C / t};
    for (int i = 0; i < 4; ++i) {
      w.forward.add_gemm({N, out[i], in[i]});
      w.backward_input.add_gemm({N, in[i], out[i]});
      w.backward_weight.add_gemm({out[i], in[i], N});
    }
    // Attention per head and sequence: scores (Tq x T x hs) and their product with v (Tq x hs x T);
    // the backward's four products are one of the first shape and three of the second. Context
    // parallelism's ring (unfused) computes tiles instead (add_ring_work).
    const double hs = C / nh, Tq = T / l.cp, keys = T / l.cp, heads = double(b) * nh / t * l.cp;
    // Elementwise traffic (values read + written): LayerNorms and residual reads on the stream;
    // GELU, the attention matrix's softmax passes and head reshapes in the tensor-parallel region.
    const bool ring = l.cp > 1 && !l.fused_attention;
    const double scores = l.fused_attention || ring ? 0.0 : 4.0 * nh * T;  // (fused: kept on chip)
    const double stream = 6.0 * R * C, region = N * (14.0 * C + scores) / t;
    w.forward.bytes = bytes * (stream + region), w.forward.kernels = 11;
    w.backward_input.bytes = bytes * 2.0 * (stream + region), w.backward_input.kernels = 14;
    if (ring) {
      add_ring_work(w, b, l);
    } else {
      w.forward.add_attention({Tq, keys, hs, heads});
      w.forward.add_attention({Tq, hs, keys, heads});
      w.backward_input.add_attention({Tq, keys, hs, heads});
      w.backward_input.add_attention({Tq, hs, keys, 3 * heads});
      // A fused ring: launches counted as four tiles a ring step and sequence (3 forward, 5 backward).
      if (l.cp > 1) w.forward.kernels += 3 * 4 * l.cp * b, w.backward_input.kernels += 5 * 4 * l.cp * b;
    }
    w.backward_weight.bytes = bytes * 9.0 * C * N / t, w.backward_weight.kernels = 8;  // and the bias column sums
  } else if (kind == 2) {
    // Final LayerNorm, logits, fused softmax + cross-entropy (logits in, their gradient out), and the
    // LM head's input and weight gradients, all in the trainer's forward.
    w.forward.add_gemm({N, V, C});
    w.forward.add_gemm({N, C, V});
    w.forward.add_gemm({V, C, N});
    w.forward.bytes = bytes * 2.0 * R * C + (l.fp32_loss ? 52.0 : 3.0 * bytes) * N * V;
    w.forward.kernels = l.fp32_loss ? 14 : 6;
    w.backward_input.bytes = bytes * 4.0 * R * C, w.backward_input.kernels = 2;  // the final LayerNorm's backward
  } else {
    w.forward.bytes = bytes * 3.0 * R * C, w.forward.kernels = 1;                 // token and position rows summed
    w.backward_weight.bytes = bytes * 3.0 * N * C, w.backward_weight.kernels = 1;  // scattered into wte's and wpe's gradients
  }
  return w;
}

void CostModel::add_ring_work(UnitWork& w, int b, const Layout& l) const {
  // An unfused ring (the trainer's before its fused kernels; perf.fused_attention = false with cp > 1):
  // a sequence in 2cp chunks of L = T / 2cp, a rank
  // holding two, so its queries meet 2cp + 1 key chunks at or before their own over the ring (the
  // diagonal ones computed whole, then masked). A tile is nh / tp batched products of L rows: the
  // forward's scores (L x L x hs) and P v (L x hs x L), then the merge (scores read twice, written
  // once; O rescaled); the backward's scores again and dP (L x L x hs), dv, dq, dk (L x hs x L) and
  // one elementwise pass (S and dP read and written). Launches: 3 a tile forward, 6 backward.
  const ModelConfig& m = w_.model;
  const double t = l.tp, C = m.n_embd, nh = m.n_head / t, hs = C / m.n_head;
  const double L = double(w_.seq_len) / (2 * l.cp), tiles = (2.0 * l.cp + 1) * b, heads = nh * tiles;
  const double rows = double(b) * w_.seq_len / l.cp, bytes = l.bytes_per_value();
  w.forward.add_attention({L, L, hs, heads});
  w.forward.add_attention({L, hs, L, heads});
  w.backward_input.add_attention({L, L, hs, 2 * heads});
  w.backward_input.add_attention({L, hs, L, 3 * heads});
  // Per rank and pass, besides the tiles: K/V copied into the ring's buffer (read + write 2C/tp a
  // row), the forward's state set and its output normalised; the backward's gradients zeroed, the
  // dot of dy and y, and the K/V gradients copied back.
  w.forward.bytes += bytes * (heads * (3 * L * L + 2 * L * hs) + rows * 8.0 * C / t);
  w.backward_input.bytes += bytes * (heads * 4 * L * L + rows * 15.0 * C / t);
  w.forward.kernels += int(3 * tiles) + 6, w.backward_input.kernels += int(6 * tiles) + 6;
}

double CostModel::gemm_seconds(const Gemm& g, Precision precision) const {
  const double peak = hw_.peak(precision);
  if (peak <= 0 || g.flops() <= 0) return 0;
  if (hw_.multiprocessors <= 0) return g.flops() / (peak * hw_.gemm_efficiency);
  const double sms = hw_.multiprocessors, TM = hw_.gemm_tile_m, TN = hw_.gemm_tile_n;
  auto intensity = [](double a, double b) { return a * b / (a + b); };
  const double big = intensity(TM, TN);
  const double tiles_mn[6][2] = {{TM, TN}, {TN, TM}, {TM / 2, TN}, {TN, TM / 2}, {TM / 2, TN / 2}, {TM / 4, TN / 2}};
  const double depth = g.k / (g.k + hw_.gemm_k_overhead);
  double best = 1e300;
  for (const auto& tile : tiles_mn) {
    const double tm = std::max(1.0, tile[0]), tn = std::max(1.0, tile[1]);
    const double rate = peak / sms * hw_.gemm_efficiency * std::sqrt(intensity(tm, tn) / big) * depth;
    const double tiles = std::ceil(g.m / tm) * std::ceil(g.n / tn) * g.batch;
    best = std::min(best, std::ceil(tiles / sms) * 2 * tm * tn * g.k / rate);
  }
  // Bytes at the GEMM's input precision (fp32 GEMMs read and write fp32).
  const double value = precision == Precision::fp32 ? 4 : 2;
  const double traffic = value * (g.m * g.k + g.k * g.n + g.m * g.n) * g.batch;
  return std::max(best, traffic / (hw_.memory_bandwidth * hw_.memory_efficiency));
}

double CostModel::modelled(const Work& work, Precision precision, bool fused_attention) const {
  const double peak = hw_.peak(precision);
  const double bw = hw_.memory_bandwidth * hw_.memory_efficiency;
  double gemm = 0;
  if (hw_.multiprocessors <= 0) {
    gemm = peak > 0 ? (work.gemm_flops + work.attention_flops) / (peak * hw_.gemm_efficiency) : 0;
  } else {
    for (int i = 0; i < work.n_gemms; ++i) gemm += gemm_seconds(work.gemms[i], precision);
    if (fused_attention && hw_.flash_attention_efficiency > 0)  // the causal half of the products
      gemm += peak > 0 ? 0.5 * work.attention_flops / (peak * hw_.flash_attention_efficiency) : 0;
    else
      for (int i = 0; i < work.n_attention; ++i) gemm += gemm_seconds(work.attention[i], precision);
  }
  return gemm + work.bytes / bw;
}

UnitTime CostModel::unit_time(int u, int b, const Layout& l) const {
  const UnitWork w = unit_work(u, b, l);
  UnitTime t;
  // The calibration scales the work; a launch costs what the hardware file says wherever it runs.
  const double launch = hw_.kernel_overhead;
  t.forward = modelled(w.forward, l.precision, l.fused_attention) * scale(u, 0) + w.forward.kernels * launch;
  t.backward_input = modelled(w.backward_input, l.precision, l.fused_attention) * scale(u, 1) +
                     w.backward_input.kernels * launch;
  t.backward_weight = modelled(w.backward_weight, l.precision, l.fused_attention) * scale(u, 1) +
                      w.backward_weight.kernels * launch;
  return t;
}

double CostModel::expected_max_normal(int n) {
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the trapezoid rule on [-12, 12] (its tails
  // are negligible for any n a cluster has); remembered per n.
  static std::map<int, double> known;
  if (n <= 1) return 0;
  auto it = known.find(n);
  if (it != known.end()) return it->second;
  const int steps = 24000;
  const double lo = -12, h = 24.0 / steps;
  double sum = 0;
  for (int i = 0; i <= steps; ++i) {
    const double x = lo + i * h, phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double Phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += (i == 0 || i == steps ? 0.5 : 1.0) * x * n * phi * std::pow(Phi, n - 1);
  }
  return known[n] = sum * h;
}

double CostModel::node_slowdown(const Layout& l) const {
  const int n = hw_.devices_per_node;
  if (n <= 1) return 1;
  const double busy = double(std::min<long long>(l.world(), n));
  return 1 + (hw_.shared_slowdown - 1) * (busy - 1) / (n - 1);
}

double CostModel::cp_forward(int b, const Layout& l) const {
  if (l.cp <= 1) return 0;
  // cp - 1 shifts of the rank's K/V block (fp32), the next one's overlapped with the current tiles.
  const double block = double(b) * w_.seq_len / l.cp * 2.0 * w_.model.n_embd / l.tp * 4.0;
  return (1 - hw_.comm_overlap) * (l.cp - 1) * send(block, l.tp);
}

double CostModel::cp_backward(int b, const Layout& l) const {
  if (l.cp <= 1) return 0;
  // cp - 1 shifts of K/V overlapped like the forward's, and cp of their gradients after each step's tiles.
  const double block = double(b) * w_.seq_len / l.cp * 2.0 * w_.model.n_embd / l.tp * 4.0;
  return (1 - hw_.comm_overlap) * (l.cp - 1) * send(block, l.tp) + l.cp * send(block, l.tp);
}

double CostModel::tp_forward(int u, int b, const Layout& l) const {
  if (l.tp <= 1) return 0;
  const double stream = double(b) * w_.seq_len / l.cp * w_.model.n_embd * l.bytes_per_value();
  const int kind = unit_kind(u, w_.model.n_layer);
  const bool sp = l.sequence_parallel;
  // Megatron's g: an all-reduce after each row-parallel projection (with sequence parallelism an
  // all-gather before the region and a reduce-scatter after it).
  auto region = [&](int n) {
    return n * (sp ? all_gather(stream, l.tp, 1) + reduce_scatter(stream, l.tp, 1) : all_reduce(stream, l.tp, 1));
  };
  if (kind == 1) return l.tp_comm_overlap ? std::max(0.0, region(2) - unit_time(u, b, l).forward) : region(2);
  if (kind == 0) return sp ? reduce_scatter(stream, l.tp, 1) : all_reduce(stream, l.tp, 1);
  // The head: the normed rows gathered (sp), the vocabulary-parallel loss's row maxima and sums, the
  // LM head's input gradient summed.
  const double rows = double(b) * w_.seq_len / l.cp * 4;
  return (sp ? all_gather(stream, l.tp, 1) + reduce_scatter(stream, l.tp, 1) : all_reduce(stream, l.tp, 1)) +
         all_reduce(rows, l.tp, 1) + all_reduce(2 * rows, l.tp, 1);
}

double CostModel::tp_backward(int u, int b, const Layout& l) const {
  if (l.tp <= 1) return 0;
  const double stream = double(b) * w_.seq_len / l.cp * w_.model.n_embd * l.bytes_per_value();
  const int kind = unit_kind(u, w_.model.n_layer);
  const bool sp = l.sequence_parallel;
  if (kind == 1) {  // Megatron's f: the column-parallel input gradients summed, twice
    const double c = 2 * (sp ? all_gather(stream, l.tp, 1) + reduce_scatter(stream, l.tp, 1) : all_reduce(stream, l.tp, 1));
    return l.tp_comm_overlap ? std::max(0.0, c - unit_time(u, b, l).backward()) : c;
  }
  if (kind == 0) return sp ? all_gather(stream, l.tp, 1) : 0.0;
  return 0;
}

double CostModel::data(int b) const {
  if (cal_) return cal_->data_per_sequence * b;
  return hw_.kernel_overhead * 2;  // two small host-to-device copies
}

double CostModel::optimizer(double params) const {
  if (cal_ && cal_->optimizer_per_param > 0) return cal_->optimizer_per_param * params;
  // Fused AdamW: reads p, g, m, v and writes p, m, v (28 bytes a parameter).
  return params * 28.0 / (hw_.memory_bandwidth * hw_.memory_efficiency) + hw_.kernel_overhead;
}

double CostModel::newton_schulz(double flops, int launches, ValueType dtype) const {
  const double rate = hw_.peak(dtype == ValueType::bf16 ? Precision::bf16 : Precision::fp32) * hw_.gemm_efficiency;
  if (flops <= 0 || rate <= 0) return 0;
  return flops / rate + launches * hw_.kernel_overhead;
}

double CostModel::gradient_pass(double params) const {
  if (cal_) return 0.5 * cal_->other_per_param * params;
  return params * 4.0 / (hw_.memory_bandwidth * hw_.memory_efficiency) + hw_.kernel_overhead;
}

CostModel::Group CostModel::group(int n, int stride) const {
  Group g;
  const int per_node = hw_.devices_per_node;
  // Ranks fill nodes in order: members `stride` apart share a node while stride < devices_per_node.
  g.per_node = stride >= per_node ? 1 : std::max(1, std::min(n, per_node / std::max(1, stride)));
  g.nodes = (n + g.per_node - 1) / g.per_node;
  return g;
}

double CostModel::ring(double steps, double bytes_per_rank, int n, int stride, int inter_steps) const {
  // NCCL's ring model (src/graph/tuning.cc): a fixed cost, then every step a hop's latency -- the
  // hops that cross nodes at the network's -- and the data at the slowest link's bandwidth.
  const Group g = group(n, stride);
  const double bandwidth = g.nodes > 1 ? std::min(hw_.intra.bandwidth, hw_.inter.bandwidth) : hw_.intra.bandwidth;
  const double inter = g.nodes > 1 ? std::min(steps, double(inter_steps)) : 0;
  return hw_.collective_latency + (steps - inter) * hw_.intra.latency + inter * hw_.inter.latency +
         bytes_per_rank / bandwidth;
}

double CostModel::all_reduce(double bytes, int n, int stride) const {
  if (n <= 1 || free_comm_) return 0;
  const Group g = group(n, stride);
  const double r = ring(2.0 * (n - 1), 2.0 * (n - 1) / n * bytes, n, stride, 2 * (g.nodes - 1));
  if (g.nodes <= 2) return r;
  // NCCL's tree across nodes (a chain inside each): 2 ((per node - 1) intra + log2(nodes) inter)
  // hops; its bus bandwidth 0.9 of the ring's.
  const double depth = std::ceil(std::log2(double(g.nodes)));
  const double tree = hw_.collective_latency + 2 * ((g.per_node - 1) * hw_.intra.latency + depth * hw_.inter.latency) +
                      2.0 * bytes / (0.9 * hw_.inter.bandwidth);
  return std::min(r, tree);
}

double CostModel::reduce_scatter(double bytes, int n, int stride) const {
  if (n <= 1 || free_comm_) return 0;
  return ring(n - 1.0, double(n - 1) / n * bytes, n, stride, group(n, stride).nodes - 1);
}

double CostModel::all_gather(double bytes, int n, int stride) const { return reduce_scatter(bytes, n, stride); }

double CostModel::send(double bytes, int stride) const {
  if (free_comm_) return 0;
  const Link& k = hw_.p2p_link(stride);
  return k.latency + bytes / k.bandwidth;
}

}  // namespace gpt2
