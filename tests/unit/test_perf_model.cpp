// The performance model without a trace: hardware files, the cost model's scaling rules, the step
// simulation against schedule theory and ParamStore's memory table, the layout enumerator.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "model/param_layout.hpp"
#include "perf/planner.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/schedule.hpp"

using namespace gpt2;

namespace {
// A round-numbered device: 100 TFLOP/s, 1 TB/s, 8 per node, 100 GB/s inside, 10 GB/s across nodes.
Hardware test_hardware(double overlap = 1.0) {
  Hardware h;
  h.file = "test", h.name = "test device";
  h.peak_fp32 = 100e12, h.peak_bf16 = 200e12;
  h.gemm_efficiency = 0.5, h.memory_bytes = 80e9, h.memory_bandwidth = 1e12, h.memory_efficiency = 0.5;
  h.kernel_overhead = 0;
  h.devices_per_node = 8, h.comm_overlap = overlap;
  h.intra = {100e9, 1e-6}, h.inter = {10e9, 5e-6};
  return h;
}

Workload small_model(int64_t batch = 16) {
  Workload w;
  w.model.n_layer = 8, w.model.n_head = 8, w.model.n_embd = 256, w.model.vocab_size = 256, w.model.block_size = 128;
  w.seq_len = 128, w.batch = batch;
  return w;
}

Workload gpt2_124m(int64_t batch = 512) {
  Workload w;  // ModelConfig's defaults are GPT-2 124M
  w.seq_len = 1024, w.batch = batch;
  return w;
}

// A calibration of w at microbatch 16, tp 1: embedding, block and head forward 1, 80, 20 ms;
// backward 2, 150, 1 ms.
Calibration traced_units(const Workload& w) {
  Calibration cal;
  cal.model = w.model, cal.seq_len = w.seq_len, cal.microbatch = 16, cal.tp = 1;
  cal.forward = {0.001, 0.080, 0.020};
  cal.backward = {0.002, 0.150, 0.001};
  return cal;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

const char* kFullHardware =
    "[device]\nname = \"x\"\npeak_tflops_fp32 = 1.0\npeak_tflops_tf32 = 0\npeak_tflops_bf16 = 2\n"
    "gemm_efficiency = 0.5\nmemory_gb = 16\nmemory_bandwidth_gbs = 100\nmemory_efficiency = 0.5\n"
    "kernel_overhead_us = 3\n[node]\ndevices_per_node = 4\ncomm_overlap = 1\nshared_slowdown = 1.3\n"
    "[intra_node]\nbandwidth_gbs = 50\nlatency_us = 2\n[inter_node]\nbandwidth_gbs = 10\nlatency_us = 5\n";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Hardware, ReadsEveryKeyAndNamesAMissingOne) {
  const Hardware h = Hardware::load(write_file("hw_full.toml", kFullHardware));
  EXPECT_EQ(h.name, "x");
  EXPECT_DOUBLE_EQ(h.peak(Precision::fp32), 1e12);
  EXPECT_DOUBLE_EQ(h.peak(Precision::bf16), 2e12);
  EXPECT_EQ(h.devices_per_node, 4);
  EXPECT_DOUBLE_EQ(h.intra.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(h.inter.latency, 5e-6);
  EXPECT_DOUBLE_EQ(h.kernel_overhead, 3e-6);
  EXPECT_DOUBLE_EQ(h.shared_slowdown, 1.3);
  // Without p2p keys a message is priced as a collective's step; with them, by them.
  EXPECT_DOUBLE_EQ(h.p2p_link(1).bandwidth, h.intra.bandwidth);
  std::string with_p2p = kFullHardware;
  const std::string intra = "latency_us = 2\n";
  with_p2p.insert(with_p2p.find(intra) + intra.size(), "p2p_bandwidth_gbs = 7\np2p_latency_us = 2\n");
  const Hardware p = Hardware::load(write_file("hw_p2p.toml", with_p2p));
  EXPECT_DOUBLE_EQ(p.p2p_link(1).bandwidth, 7e9);
  EXPECT_DOUBLE_EQ(p.p2p_link(1).latency, 2e-6);
  EXPECT_DOUBLE_EQ(p.p2p_link(1000).bandwidth, p.inter.bandwidth);

  std::string text = kFullHardware;
  text.erase(text.find("memory_bandwidth_gbs = 100\n"), std::string("memory_bandwidth_gbs = 100\n").size());
  const std::string path = write_file("hw_missing.toml", text);
  const std::string msg = error_of([&] { Hardware::load(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key device.memory_bandwidth_gbs"), std::string::npos) << msg;

  const std::string typo = write_file("hw_typo.toml", std::string(kFullHardware) + "[node]\ngpus = 8\n");
  EXPECT_NE(error_of([&] { Hardware::load(typo); }).find(typo), std::string::npos);
  std::string negative = kFullHardware;
  negative.replace(negative.find("memory_gb = 16"), 14, "memory_gb = -1");
  EXPECT_NE(error_of([&] { Hardware::load(write_file("hw_neg.toml", negative)); }).find("memory_gb"), std::string::npos);
  EXPECT_NE(error_of([] { Hardware::load("/nonexistent/hw.toml"); }).find("/nonexistent/hw.toml"), std::string::npos);

  // Optional keys of a device file: GEMM efficiency by shape and a collective's fixed cost.
  EXPECT_EQ(h.multiprocessors, 0);  // (absent: one efficiency for every GEMM)
  EXPECT_DOUBLE_EQ(h.collective_latency, 0);
  std::string device = kFullHardware;
  const std::string after = "gemm_efficiency = 0.5\n";
  device.insert(device.find(after) + after.size(),
                "multiprocessors = 108\ngemm_tile_m = 128\ngemm_k_overhead = 256\nflash_attention_efficiency = 0.4\n");
  device.insert(device.find("shared_slowdown"), "collective_latency_us = 8.4\n");
  const Hardware d = Hardware::load(write_file("hw_device.toml", device));
  EXPECT_EQ(d.multiprocessors, 108);
  EXPECT_EQ(d.gemm_tile_m, 128);
  EXPECT_EQ(d.gemm_tile_n, 128);  // the default
  EXPECT_DOUBLE_EQ(d.gemm_k_overhead, 256);
  EXPECT_DOUBLE_EQ(d.flash_attention_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(d.collective_latency, 8.4e-6);
  std::string half_sm = device;
  half_sm.replace(half_sm.find("multiprocessors = 108"), 21, "multiprocessors = 1.5");
  EXPECT_NE(error_of([&] { Hardware::load(write_file("hw_half_sm.toml", half_sm)); }).find("device.multiprocessors"),
            std::string::npos);
}

TEST(Hardware, GroupsInsideANodeUseItsLinks) {
  const Hardware h = test_hardware();
  EXPECT_EQ(&h.link(8, 1), &h.intra);   // tp 8: one node
  EXPECT_EQ(&h.link(2, 4), &h.intra);   // ranks 0 and 4
  EXPECT_EQ(&h.link(2, 8), &h.inter);   // ranks 0 and 8: two nodes
  EXPECT_EQ(&h.link(16, 1), &h.inter);
}

TEST(CostModel, WorkScalesWithMicrobatchTensorSplitAndSequenceParallelism) {
  const CostModel cm(small_model(), test_hardware());
  Layout one, two;
  two.tp = 2;
  const UnitWork b1 = cm.unit_work(1, 4, one), b2 = cm.unit_work(1, 8, one), t2 = cm.unit_work(1, 4, two);
  EXPECT_DOUBLE_EQ(b2.forward.gemm_flops, 2 * b1.forward.gemm_flops);  // linear in tokens
  EXPECT_DOUBLE_EQ(b2.forward.bytes, 2 * b1.forward.bytes);
  EXPECT_DOUBLE_EQ(t2.forward.gemm_flops, b1.forward.gemm_flops / 2);  // tp divides the GEMMs
  EXPECT_DOUBLE_EQ(t2.forward.attention_flops, b1.forward.attention_flops / 2);
  EXPECT_GT(t2.forward.bytes, b1.forward.bytes / 2);  // but not the residual stream's LayerNorms
  Layout sp = two;
  sp.sequence_parallel = true;
  EXPECT_NEAR(cm.unit_work(1, 4, sp).forward.bytes, b1.forward.bytes / 2, 1e-6 * b1.forward.bytes);
  // GPT-2 block: 24 N C^2 GEMM FLOPs forward, backward twice that.
  const double N = 4 * 128, C = 256;
  EXPECT_DOUBLE_EQ(b1.forward.gemm_flops, 24 * N * C * C);
  EXPECT_DOUBLE_EQ(b1.backward_input.gemm_flops + b1.backward_weight.gemm_flops, 48 * N * C * C);
  // bf16 halves the bytes and runs the GEMMs at the bf16 peak.
  Layout half;
  half.precision = Precision::bf16;
  EXPECT_DOUBLE_EQ(cm.unit_work(1, 4, half).forward.bytes, b1.forward.bytes / 2);
  EXPECT_LT(cm.unit_time(1, 4, half).forward, cm.unit_time(1, 4, one).forward);
}

TEST(CostModel, CalibrationReproducesTheTraceAndScalesByWork) {
  const Workload w = small_model();
  Calibration cal = traced_units(w);
  cal.optimizer_per_param = 1e-9, cal.other_per_param = 2e-9, cal.data_per_sequence = 1e-5;
  const CostModel cm(w, test_hardware(), &cal);
  Layout l;
  const UnitTime block = cm.unit_time(1, 16, l), head = cm.unit_time(w.model.n_layer + 1, 16, l);
  EXPECT_NEAR(block.forward, 0.080, 1e-12);
  EXPECT_NEAR(block.backward(), 0.150, 1e-12);
  EXPECT_NEAR(head.forward, 0.020, 1e-12);
  EXPECT_NEAR(cm.unit_time(0, 16, l).backward(), 0.002, 1e-12);
  // No kernel overhead here: the work, so the time, is linear in the microbatch.
  EXPECT_NEAR(cm.unit_time(1, 4, l).forward, 0.020, 1e-12);
  Layout tp2;
  tp2.tp = 2;
  const double split = cm.unit_time(1, 16, tp2).forward;
  EXPECT_GT(split, 0.040);  // more than half: the LayerNorms stay whole
  EXPECT_LT(split, 0.060);
  EXPECT_NEAR(cm.optimizer(1e6), 1e-3, 1e-12);
  EXPECT_NEAR(cm.gradient_pass(1e6), 1e-3, 1e-12);
  EXPECT_NEAR(cm.data(4), 4e-5, 1e-15);
  // Another shape is refused with a message naming the trace and the difference.
  cal.path = "cal.h5";
  Workload other = w;
  other.model.n_layer = 12;
  const std::string msg = error_of([&] { cal.require_shape(other.model, other.seq_len, "x.toml"); });
  EXPECT_NE(msg.find("cal.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("n_layer: 12 vs 8"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { cal.require_shape(w.model, 64, "x.toml"); }).find("seq_len: 64 vs 128"), std::string::npos);
  EXPECT_EQ(error_of([&] { cal.require_shape(w.model, w.seq_len, "x.toml"); }), "");
}

TEST(CostModel, LaunchesAreAddedOutsideTheCalibrationsScale) {
  const Workload w = small_model();
  Calibration cal = traced_units(w);
  Hardware h = test_hardware();
  h.kernel_overhead = 100e-6;
  const CostModel cm(w, h, &cal);
  Layout l;
  const UnitWork uw = cm.unit_work(1, 16, l);
  const double launches = uw.forward.kernels * h.kernel_overhead;
  EXPECT_NEAR(cm.unit_time(1, 16, l).forward, 0.080, 1e-12);  // the trace reproduced
  EXPECT_NEAR(cm.unit_time(1, 16, l).backward(), 0.150, 1e-12);
  // A quarter of the work, the same launches.
  EXPECT_NEAR(cm.unit_time(1, 4, l).forward, (0.080 - launches) / 4 + launches, 1e-12);
}

TEST(CostModel, ContextParallelRingPricesTheTilesTheTrainerComputes) {
  const Workload w = small_model();  // T 128, 8 heads of 32
  Hardware h = test_hardware();
  h.kernel_overhead = 1e-6;
  const CostModel cm(w, h);
  for (int cp : {2, 3, 4}) {
    // An unfused ring's (L x L) tiles: each rank's two query chunks against the key chunks at or
    // before them over every block of the ring.
    for (int i = 0; i < cp; ++i) {
      int tiles = 0;
      for (int src = 0; src < cp; ++src)
        for (int q : {i, 2 * cp - 1 - i})
          for (int k : {src, 2 * cp - 1 - src}) tiles += k <= q;
      EXPECT_EQ(tiles, 2 * cp + 1) << "cp " << cp << " rank " << i;
    }
    Layout l;
    l.cp = cp;
    const int b = 4;
    const double L = 128.0 / (2 * cp), hs = 32, heads = 8.0 * (2 * cp + 1) * b;
    const UnitWork uw = cm.unit_work(1, b, l);
    EXPECT_DOUBLE_EQ(uw.forward.attention_flops, 2 * (2 * L * L * hs * heads)) << cp;  // scores, P v
    EXPECT_DOUBLE_EQ(uw.backward_input.attention_flops, 5 * (2 * L * L * hs * heads)) << cp;  // scores again, 4
    EXPECT_EQ(uw.forward.kernels, 11 + 3 * (2 * cp + 1) * b + 6) << cp;
    EXPECT_EQ(uw.backward_input.kernels, 14 + 6 * (2 * cp + 1) * b + 6) << cp;
    // The linear layers see the rank's T / cp rows of each sequence.
    EXPECT_DOUBLE_EQ(uw.forward.gemm_flops, 24.0 * b * 128 / cp * 256 * 256) << cp;
  }
  // A fused ring keeps the whole causal half, priced at the flash efficiency (other trainers).
  Layout fused;
  fused.cp = 2, fused.fused_attention = true;
  EXPECT_DOUBLE_EQ(cm.unit_work(1, 4, fused).forward.attention_flops, 2 * (2.0 * 64 * 64 * 32 * 8 * 4 * 2));
}

TEST(CostModel, ABusyNodeSlowsItsRanks) {
  Hardware h = test_hardware();
  h.shared_slowdown = 1.4;  // 8 devices a node
  const CostModel cm(small_model(), h);
  Layout l;
  EXPECT_DOUBLE_EQ(cm.node_slowdown(l), 1.0);  // one rank: nothing shared
  l.dp = 8;
  EXPECT_DOUBLE_EQ(cm.node_slowdown(l), 1.4);
  l.dp = 64;
  EXPECT_DOUBLE_EQ(cm.node_slowdown(l), 1.4);
  l.dp = 2;
  EXPECT_NEAR(cm.node_slowdown(l), 1 + 0.4 / 7, 1e-12);
  // and the step with it
  const CostModel cm1(small_model(), test_hardware());
  l.dp = 1, l.pp = 2;
  EXPECT_GT(predict_step(cm, l).step_s, predict_step(cm1, l).step_s);
}

TEST(CostModel, StragglersFollowNormalOrderStatistics) {
  EXPECT_DOUBLE_EQ(CostModel::expected_max_normal(1), 0);
  EXPECT_NEAR(CostModel::expected_max_normal(2), 1 / std::sqrt(M_PI), 1e-4);  // E[max of 2] = 1/sqrt(pi)
  for (int n = 2; n < 4096; n *= 2)
    EXPECT_LT(CostModel::expected_max_normal(n), CostModel::expected_max_normal(2 * n)) << n;
  EXPECT_NEAR(CostModel::expected_max_normal(1024), 3.2414, 0.05);  // tabulated value
  // A calibration with noise slows the tensor- and data-parallel layouts that wait for each other.
  const Workload w = small_model();
  Calibration cal;
  cal.model = w.model, cal.seq_len = w.seq_len, cal.microbatch = 16;
  cal.forward = {0.001, 0.080, 0.020};
  cal.backward = {0.002, 0.150, 0.001};
  Calibration noisy = cal;
  noisy.jitter = 0.2;
  const CostModel quiet(w, test_hardware(), &cal), loud(w, test_hardware(), &noisy);
  for (const auto& [dp, tp] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}}) {
    Layout l;
    l.dp = dp, l.tp = tp;
    EXPECT_GT(predict_step(loud, l).step_s, predict_step(quiet, l).step_s) << dp << " " << tp;
  }
  Layout one;
  EXPECT_DOUBLE_EQ(predict_step(loud, one).step_s, predict_step(quiet, one).step_s);  // nobody to wait for
}

TEST(CostModel, CollectivesFollowTheRingFormulas) {
  const CostModel cm(small_model(), test_hardware());
  const double S = 1e9;
  EXPECT_DOUBLE_EQ(cm.all_reduce(S, 1, 1), 0);
  EXPECT_NEAR(cm.all_reduce(S, 2, 1), 2 * 1e-6 + S / 100e9, 1e-12);
  EXPECT_NEAR(cm.all_reduce(S, 8, 1), 14 * 1e-6 + 2.0 * 7 / 8 * S / 100e9, 1e-12);
  EXPECT_NEAR(cm.reduce_scatter(S, 4, 1), 3 * 1e-6 + 0.75 * S / 100e9, 1e-12);
  // Two nodes: of the ring's 30 steps, 2 cross a node at the network's latency (NCCL's own model),
  // the data at the network's bandwidth.
  EXPECT_NEAR(cm.all_reduce(S, 16, 1), 28 * 1e-6 + 2 * 5e-6 + 2.0 * 15 / 16 * S / 10e9, 1e-12);
  EXPECT_NEAR(cm.send(S, 1), 1e-6 + S / 100e9, 1e-12);
  CostModel free = cm;
  free.set_free_communication(true);
  EXPECT_DOUBLE_EQ(free.all_reduce(S, 8, 1), 0);
}

TEST(CostModel, CollectivesFollowTheTopology) {
  Hardware h = test_hardware();
  h.collective_latency = 10e-6;
  const CostModel cm(small_model(), h);
  EXPECT_EQ(cm.group(16, 1).per_node, 8);  // ranks fill nodes in order
  EXPECT_EQ(cm.group(16, 1).nodes, 2);
  EXPECT_EQ(cm.group(4, 8).per_node, 1);   // tp 8 between them: one a node
  EXPECT_EQ(cm.group(4, 8).nodes, 4);
  EXPECT_EQ(cm.group(2, 4).nodes, 1);
  // A ring's steps inside a node at the node's latency, the ones between nodes at the network's,
  // and the collective's fixed cost once.
  EXPECT_NEAR(cm.reduce_scatter(0, 16, 1), 10e-6 + 14 * 1e-6 + 1 * 5e-6, 1e-15);
  EXPECT_NEAR(cm.all_gather(0, 4, 8), 10e-6 + 3 * 5e-6, 1e-15);
  // Across many nodes a small all-reduce takes NCCL's tree: 2 (7 intra + log2(128) inter) hops
  // instead of the ring's 2 x 1023 steps.
  const double tree = 10e-6 + 2 * (7 * 1e-6 + 7 * 5e-6) + 2.0 * 1024 / (0.9 * 10e9);
  EXPECT_NEAR(cm.all_reduce(1024, 1024, 1), tree, 1e-12);
  EXPECT_GT(10e-6 + (2 * 1023 - 2 * 127) * 1e-6 + 2 * 127 * 5e-6, 5 * tree);
  // Large buffers: the ring (its bandwidth term is the smaller).
  EXPECT_NEAR(cm.all_reduce(1e10, 1024, 1), 10e-6 + (2 * 1023 - 2 * 127) * 1e-6 + 2 * 127 * 5e-6 + 2.0 * 1023 / 1024 * 1e10 / 10e9,
              1e-9);
}

TEST(CostModel, GemmEfficiencyFollowsTheShape) {
  Hardware h = test_hardware();  // 100 TFLOP/s fp32 at 0.5, 1 TB/s at 0.5
  const Gemm square{2560, 1280, 4096};
  EXPECT_DOUBLE_EQ(CostModel(small_model(), h).gemm_seconds(square, Precision::fp32), square.flops() / (100e12 * 0.5));
  h.multiprocessors = 100, h.gemm_tile_m = 256, h.gemm_tile_n = 128;
  const CostModel cm(small_model(), h);
  // 10 x 10 = 100 large tiles: one full wave, at gemm_efficiency.
  EXPECT_NEAR(cm.gemm_seconds(square, Precision::fp32), square.flops() / (100e12 * 0.5), 1e-9 * cm.gemm_seconds(square, Precision::fp32));
  // One row more needs a second wave (or smaller, slower tiles): far slower than its 0.04% more work.
  EXPECT_GT(cm.gemm_seconds({2561, 1280, 4096}, Precision::fp32), 1.3 * cm.gemm_seconds(square, Precision::fp32));
  // A tile's fixed cost as extra depth: K = 4096 plus 4096 runs at half the rate.
  Hardware slow_tiles = h;
  slow_tiles.gemm_k_overhead = 4096;
  EXPECT_NEAR(CostModel(small_model(), slow_tiles).gemm_seconds(square, Precision::fp32), 2 * cm.gemm_seconds(square, Precision::fp32),
              1e-9 * cm.gemm_seconds(square, Precision::fp32));
  // A skinny GEMM is bound by its memory traffic: A and B read, C written, 4 bytes a value in fp32.
  const Gemm skinny{1 << 20, 8, 8};
  const double traffic = 4.0 * ((1 << 20) * 8.0 * 2 + 64);
  EXPECT_NEAR(cm.gemm_seconds(skinny, Precision::fp32), traffic / (1e12 * 0.5), 1e-9 * traffic / 5e11);
  // Larger blocks run closer to the peak: a block's forward per FLOP, C 256 against C 2048.
  Workload narrow = small_model(), wide = small_model();
  wide.model.n_embd = 2048, wide.model.n_head = 16;
  Layout l;
  auto per_flop = [&](const Workload& w) {
    const CostModel c(w, h);
    const Work f = c.unit_work(1, 4, l).forward;
    return c.modelled(f, Precision::fp32) / (f.gemm_flops + f.attention_flops);
  };
  EXPECT_LT(per_flop(wide), 0.8 * per_flop(narrow));
  // Unit work carries every GEMM's shape: the block's four forward GEMMs add up to its FLOPs.
  const Work f = cm.unit_work(1, 4, l).forward;
  double sum = 0;
  for (int i = 0; i < f.n_gemms; ++i) sum += f.gemms[i].flops();
  EXPECT_DOUBLE_EQ(sum, f.gemm_flops);
  EXPECT_EQ(f.n_gemms, 4);
  EXPECT_EQ(f.n_attention, 2);
}

TEST(StepModel, OneRankIsTheSumOfItsParts) {
  const Workload w = small_model();
  const CostModel cm(w, test_hardware());
  Layout l;
  l.microbatches = 4;
  const StepPrediction p = predict_step(cm, l);
  ASSERT_TRUE(p.valid()) << p.problem;
  double per_mb = cm.data(4);
  for (int u = 0; u <= w.model.n_layer + 1; ++u) {
    const UnitTime t = cm.unit_time(u, 4, l);
    per_mb += t.forward + t.backward();
  }
  const double params = double(ParamLayout(w.model).total());
  const double want = 4 * per_mb + cm.optimizer(params) + 2 * cm.gradient_pass(params);
  EXPECT_NEAR(p.step_s, want, 1e-9 * want);
  EXPECT_NEAR(p.tokens_per_s, 16 * 128 / want, 1e-6 * p.tokens_per_s);
  EXPECT_DOUBLE_EQ(p.exposed_comm_s, 0);
  EXPECT_EQ(p.memory_per_rank().size(), 1u);
}

TEST(StepModel, PipelineBubbleAndInFlightFollowTheSchedules) {
  // Eight equal blocks, a tiny head, free messages: stages of (almost) equal cost.
  Hardware h = test_hardware();
  h.intra = h.inter = {1e18, 0};
  const Workload w = small_model(32);
  const CostModel cm(w, h);
  for (const char* sched : {"gpipe", "1f1b"})
    for (int m : {1, 4, 8}) {
      Layout l;
      l.pp = 2, l.microbatches = m, l.schedule = sched;
      l.stage_layers = {4, 4};
      const StepPrediction p = predict_step(cm, l);
      ASSERT_TRUE(p.valid()) << p.problem;
      EXPECT_NEAR(p.bubble, 1.0 / (m + 1), 0.05) << sched << " m " << m;
      EXPECT_EQ(p.peak_in_flight[0], std::string(sched) == "gpipe" ? m : std::min(m, 2));
      EXPECT_EQ(p.peak_in_flight[1], std::string(sched) == "gpipe" ? m : 1);
      // Saved activations held: peak in flight x one microbatch's.
      EXPECT_NEAR(p.stage_memory[0].activations / p.peak_in_flight[0],
                  p.stage_memory[1].activations / p.peak_in_flight[1], 0.2 * p.stage_memory[0].activations);
    }
  Layout naive;
  naive.pp = 2, naive.schedule = "naive", naive.stage_layers = {4, 4};
  EXPECT_NEAR(predict_step(cm, naive).bubble, 0.5, 0.05);
}

TEST(StepModel, SlowerLinksNeverMakeAStepFaster) {
  const Workload w = gpt2_124m(64);
  Hardware fast = test_hardware(), slow = test_hardware();
  slow.intra.bandwidth /= 10, slow.inter.bandwidth /= 10;
  // dp, tp, pp, zero. (A static table, not a 64-byte initializer list on the stack: with AVX-512,
  // GCC 12 copies that with an aligned 64-byte load, and ASan's fake stack frames, under
  // detect_stack_use_after_return, are only 32-byte aligned: a fault in the sanitizer suite.)
  static const int grids[4][4] = {{8, 1, 1, 0}, {4, 2, 1, 1}, {2, 2, 2, 3}, {1, 4, 2, 0}};
  for (const auto& g : grids) {
    Layout l;
    l.dp = g[0], l.tp = g[1], l.pp = g[2], l.zero = g[3], l.microbatches = 4;
    const StepPrediction a = predict_step(CostModel(w, fast), l), b = predict_step(CostModel(w, slow), l);
    ASSERT_TRUE(a.valid()) << l.describe() << ": " << a.problem;
    EXPECT_GE(b.step_s, a.step_s) << l.describe();
    EXPECT_GT(b.exposed_comm_s, 0) << l.describe();
  }
  // Without overlap the reductions' full time adds to the step; with it, backward hides them.
  Layout dp;
  dp.dp = 8, dp.microbatches = 1;
  EXPECT_GT(predict_step(CostModel(w, test_hardware(0.0)), dp).step_s, predict_step(CostModel(w, fast), dp).step_s);
}

TEST(StepModel, ZeroThreeGathersAndReductionsShareTheLinks) {
  // ZeRO-3 over 64 ranks (8 nodes) on a slow network: each unit's parameters gathered for its
  // forward and again for its backward, and its gradient reduce-scattered, one after another on the
  // same links -- the step takes at least those three passes over the parameters.
  Hardware h = test_hardware();
  h.inter = {1e9, 5e-6};
  const Workload w = gpt2_124m(64);
  const CostModel cm(w, h);
  Layout l;
  l.dp = 64, l.zero = 3, l.bucket_mb = 1e6;  // one collective a unit
  const StepPrediction p = predict_step(cm, l);
  ASSERT_TRUE(p.valid()) << p.problem;
  const double psi = double(ParamLayout(w.model).total());
  const double pass = cm.all_gather(4 * psi, 64, 1);  // fp32: every value 4 bytes
  EXPECT_GT(p.step_s, 3 * pass);
  EXPECT_GT(p.exposed_comm_s, 2 * pass);  // far more than the compute hides
  // The same with the trainer's 25 MiB buckets: every bucket pays the ring's latency.
  Layout small = l;
  small.bucket_mb = 25;
  EXPECT_GT(predict_step(cm, small).step_s, p.step_s);
}

TEST(StepModel, OtherTrainersWaysArePriced) {
  // perf.* of gpt2 simulate --batch: how published systems ran a layout.
  Hardware h = test_hardware();
  h.multiprocessors = 108;
  const Workload w = gpt2_124m(64);
  const CostModel cm(w, h);
  Layout dp;
  dp.dp = 8, dp.microbatches = 1;
  Layout after = dp;
  after.reduce_after_backward = true;  // Megatron-LM 2021's local DDP: nothing overlaps
  EXPECT_GT(predict_step(cm, after).step_s, predict_step(cm, dp).step_s);
  Layout z1 = dp;
  z1.zero = 1;
  Layout hidden = z1;
  hidden.overlap_param_gather = true;  // the all-gather behind the next forward
  EXPECT_LT(predict_step(cm, hidden).step_s, predict_step(cm, z1).step_s);
  Layout fused = dp;
  fused.fused_attention = true;  // no scores in memory (and no flash efficiency given: its GEMMs)
  EXPECT_LT(predict_step(cm, fused).step_s, predict_step(cm, dp).step_s);
  Layout tp;
  tp.tp = 4, tp.dp = 2;
  Layout overlapped = tp;
  overlapped.tp_comm_overlap = true;
  EXPECT_LT(predict_step(cm, overlapped).step_s, predict_step(cm, tp).step_s);
  // Units padded to a multiple of the replicas (as the engine pads them): a dp that divides no unit
  // is priced, not refused.
  Layout odd;
  odd.dp = 1024, odd.zero = 1;
  const Workload big = gpt2_124m(1024);
  EXPECT_EQ(check_layout(big, odd), "");
  // The gradients' wire type: fp32 by default (parallel.grad_reduce_dtype), as the trainer sends them.
  Layout half = dp;
  half.precision = Precision::bf16;
  Layout half_wire = half;
  half_wire.grad_reduce_dtype = ValueType::bf16;
  Hardware slow = h;
  slow.inter = slow.intra = {1e9, 5e-6};
  const CostModel sc(w, slow);
  EXPECT_LT(predict_step(sc, half_wire).exposed_comm_s, predict_step(sc, half).exposed_comm_s);
  // ZeRO-1 with the gradients all-reduced whole (DeepSpeed's BF16_Optimizer in a pipeline): the
  // reduction of plain data parallelism, and still the updated parameters' all-gather.
  Layout z1_whole = z1;
  z1_whole.grad_all_reduce = true;
  EXPECT_GT(predict_step(sc, z1_whole).step_s, predict_step(sc, z1).step_s);
  EXPECT_GT(predict_step(sc, z1_whole).step_s, predict_step(sc, dp).step_s);
  // Megatron-LM's unfused fp32 loss: 52 bytes a logit where the fused kernel moves 3 values, and 8
  // more kernels, all in the head's forward.
  Hardware launch = h;
  launch.kernel_overhead = 3e-6;
  const CostModel lc(w, launch);
  Layout fp32_loss = dp;
  fp32_loss.fp32_loss = true;
  const int head = w.model.n_layer + 1, b = 8;
  const double logits = double(b) * w.seq_len * double(w.model.padded_vocab());
  const double bw = launch.memory_bandwidth * launch.memory_efficiency;
  EXPECT_NEAR(lc.unit_time(head, b, fp32_loss).forward - lc.unit_time(head, b, dp).forward,
              (52.0 - 3 * 4) * logits / bw + 8 * launch.kernel_overhead, 1e-9);
  EXPECT_EQ(lc.unit_time(head, b, fp32_loss).backward(), lc.unit_time(head, b, dp).backward());
}

TEST(StepModel, MemoryFollowsTheZeroTable) {
  const Workload w = gpt2_124m(64);
  const CostModel cm(w, test_hardware());
  const double psi = double(ParamLayout(w.model).total());
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 8, l.zero = zero, l.microbatches = 2;
    const StepPrediction p = predict_step(cm, l);
    ASSERT_TRUE(p.valid()) << p.problem;
    const RankMemory& r = p.stage_memory[0];
    const double shard = zero ? psi / 8 : psi;
    EXPECT_DOUBLE_EQ(r.optimizer, 8 * shard) << zero;  // AdamW: two fp32 moments
    EXPECT_DOUBLE_EQ(r.grads, 4 * ((zero >= 2 ? 0 : psi) + (zero ? shard : 0))) << zero;
    EXPECT_DOUBLE_EQ(r.params, 4 * ((zero == 3 ? 0 : psi) + (zero ? shard : 0))) << zero;
    EXPECT_EQ(p.memory_per_rank().size(), 8u);
    // bf16: the 16-bit working copies beside the masters, of what is kept whole and of the shard.
    l.precision = Precision::bf16;
    const StepPrediction mixed = predict_step(cm, l);
    ASSERT_TRUE(mixed.valid()) << mixed.problem;
    EXPECT_DOUBLE_EQ(mixed.stage_memory[0].params, 6 * ((zero == 3 ? 0 : psi) + (zero ? shard : 0))) << zero;
  }
}

TEST(StepModel, RefusesWhatTheTrainerRefuses) {
  const Workload w = gpt2_124m(64);
  Layout l;
  l.tp = 5;  // does not divide 12 heads
  EXPECT_NE(check_layout(w, l), "");
  l = Layout();
  l.dp = 3;  // 64 sequences do not split in 3
  EXPECT_NE(check_layout(w, l), "");
  l = Layout();
  l.pp = 13;  // more stages than blocks
  EXPECT_NE(check_layout(w, l), "");
  l = Layout();
  l.dp = 1024, l.zero = 1;  // the final norm's 1536 values: padded to 2048 (units padded to the replicas)
  EXPECT_EQ(check_layout(gpt2_124m(1024), l), "");
  l = Layout();
  l.schedule = "no-such";
  EXPECT_NE(check_layout(w, l).find("no-such"), std::string::npos);
  l = Layout();
  l.dp = 8, l.zero = 1;
  EXPECT_EQ(check_layout(w, l), "");
  // 64 sequences in one microbatch: 65536 rows of logits x 50304 columns pass a 32-bit index.
  l = Layout();
  EXPECT_NE(check_layout(w, l).find("parallel.microbatches: a microbatch of 64 sequences makes logits"), std::string::npos)
      << check_layout(w, l);
  l.microbatches = 2;  // 32768 x 50304: below 2^31 - 1
  EXPECT_EQ(check_layout(w, l), "");
  Layout three;
  three.dp = 3;
  EXPECT_FALSE(predict_step(CostModel(w, test_hardware()), three).valid());
}

TEST(Planner, EnumeratesValidGridsAndRanksFittingLayoutsByThroughput) {
  const Workload w = gpt2_124m(512);
  const Hardware h = test_hardware();
  PlanOptions o;
  o.devices = 64;
  const std::vector<Layout> all = enumerate_layouts(w, h, o);
  ASSERT_FALSE(all.empty());
  bool saw_tp = false, saw_pp = false, saw_bf16 = false;
  for (const Layout& l : all) {
    EXPECT_EQ(l.world(), 64);
    EXPECT_LE(l.tp, h.devices_per_node);
    EXPECT_EQ(check_layout(w, l), "") << l.describe();
    EXPECT_TRUE(l.pp > 1 || l.schedule == "1f1b");  // one stage: the schedules are all alike
    EXPECT_TRUE(l.dp > 1 || l.zero == 0);
    saw_tp |= l.tp > 1, saw_pp |= l.pp > 1, saw_bf16 |= l.precision == Precision::bf16;
  }
  EXPECT_TRUE(saw_tp && saw_pp && saw_bf16);
  const Plan plan = plan_layouts(CostModel(w, h), o);
  EXPECT_EQ(plan.considered, all.size());
  ASSERT_FALSE(plan.ranked.empty());
  for (size_t i = 1; i < plan.ranked.size(); ++i) EXPECT_GE(plan.ranked[i - 1].tokens_per_s, plan.ranked[i].tokens_per_s);
  for (const StepPrediction& p : plan.ranked) EXPECT_LE(p.peak_memory(), 0.9 * h.memory_bytes);
  EXPECT_EQ(plan.ranked.front().layout.precision, Precision::bf16);  // twice the peak here

  // A device too small for anything: every layout dropped, the least demanding remembered.
  Hardware tiny = h;
  tiny.memory_bytes = 1e8;
  const Plan none = plan_layouts(CostModel(w, tiny), o);
  EXPECT_TRUE(none.ranked.empty());
  EXPECT_EQ(none.too_big + none.invalid, none.considered);
  EXPECT_GT(none.smallest_too_big.peak_memory(), 0.9 * tiny.memory_bytes);
}

TEST(Simulator, MessagesTakeTheirTransferTime) {
  // Naive, 2 stages, 1 microbatch: F0, send, F1 B1, send back, B0 -- two transfers on the path.
  std::vector<std::vector<Action>> s = {make_schedule("naive", 2, 1, 0), make_schedule("naive", 2, 1, 1)};
  SimCosts c;
  c.compute = [](int, const Action& a) { return a.kind == ActionKind::forward ? 1.0 : 2.0; };
  c.transfer = [](int, int) { return 0.25; };
  Placement pl;
  pl.ranks = 2;
  const Simulation sim = simulate(s, 1, c, pl);
  ASSERT_TRUE(sim.problem.empty()) << sim.problem;
  EXPECT_DOUBLE_EQ(sim.makespan, 1 + 0.25 + 1 + 2 + 0.25 + 2);
  EXPECT_DOUBLE_EQ(sim.finish[1], 1 + 0.25 + 1 + 2);
  EXPECT_DOUBLE_EQ(sim.busy[0], 3);
}

// Muon's Newton-Schulz products are priced on each rank's block matrices: per step of one (m, n)
// matrix, m <= n, X X^T, A A and B X take 4 m^2 n + 2 m^3 FLOPs, at the fp32 GEMM rate.
TEST(CostModel, MuonAddsTheNewtonSchulzProductsOfEachOwnersMatricesAndTheirExchange) {
  const Workload w = small_model();
  const CostModel cm(w, test_hardware());
  Layout adamw, muon;
  muon.whole_matrices = true;
  const double C = 256, per_block = 14 * C * C * C + 6 * C * C * C + 18 * C * C * C + 18 * C * C * C;  // qkv, proj, fc, fcproj
  const double want = 5 * 8 * per_block / (100e12 * 0.5);  // 5 steps, 8 blocks, fp32 at gemm_efficiency
  EXPECT_NEAR(predict_step(cm, muon).step_s - predict_step(cm, adamw).step_s, want, 1e-3 * want);
  Layout pp = muon, pp_adamw = adamw;
  pp.pp = 2, pp_adamw.pp = 2;  // half the blocks a rank: half the products
  EXPECT_NEAR(predict_step(cm, pp).step_s - predict_step(cm, pp_adamw).step_s, want / 2, 0.05 * want);
  // ZeRO over 2 replicas: each owns half the products (dealt by cost: equal halves here), and the
  // matrices' parts go to their owners and back (each way an all-gather of the rank's matrix shard).
  const double E = 8 * 12 * C * C;  // the blocks' matrices' values
  Layout zero = muon, zero_adamw = adamw;
  zero.dp = zero_adamw.dp = 2, zero.zero = zero_adamw.zero = 1;
  const double exchange = 2 * cm.all_gather(4 * E / 2, 2, 1);
  EXPECT_NEAR(predict_step(cm, zero).step_s - predict_step(cm, zero_adamw).step_s, want / 2 + exchange, 0.05 * want);
  // tp 2: every tp rank orthogonalises the whole matrices its slices gather into.
  Layout tp = muon, tp_adamw = adamw;
  tp.tp = tp_adamw.tp = 2;
  const double gather = cm.all_gather(4 * E, 2, 1);
  EXPECT_NEAR(predict_step(cm, tp).step_s - predict_step(cm, tp_adamw).step_s, want + gather, 0.05 * want);
}
