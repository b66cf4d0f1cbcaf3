// gpt2 simulate CONFIG --batch FILE: many predictions in one process (tests/bench/validate_published.py
// runs hundreds of published layouts through it). Each line of FILE (or standard input for "-") that
// is not blank or a # comment is one prediction: whitespace-separated key=value words --
//   id=NAME           echoed back
//   hardware=PATH     hardware file (default: --hardware, else this box's)
//   precision=P       fp32 | bf16 (default: --precision)
//   ranks=N           as --ranks
//   section.key=V     a deck override, as --set (model.*, data.*, train.*, parallel.*)
//   perf.reduce_after_backward=true  ZeRO 0/1: reduce the gradients after the last backward, not
//                     overlapped with it (Megatron-LM's "local" DDP of 2021)
//   perf.fused_attention=true  attention as one fused kernel (FlashAttention), no scores in memory
//   perf.tp_comm_overlap=true  a block's tensor-parallel collectives hidden behind its GEMMs
//   perf.overlap_param_gather=true  ZeRO 1/2: the updated parameters' all-gather hidden behind the
//                     next step's first forward
//   perf.zero3_prefetch=false  ZeRO-3: each unit's gather issued when the unit before it ends, not
//                     as it starts (DeepSpeed's default prefetch is smaller than a large model's unit)
//   perf.grad_all_reduce=true  ZeRO-1: the gradients all-reduced whole, not reduce-scattered
//                     (DeepSpeed's BF16_Optimizer under its pipeline engine)
//   perf.fp32_loss=true  the loss in fp32 over separate passes, as Megatron-LM's unfused one
//   gemm=M,N,K[,BATCH]  not a step: one GEMM (or strided batch) of that shape, as the step model
//                     prices it on the hardware at the precision (tests/bench/fit_gemm.py holds it
//                     against measured GEMMs); its line has the id, the shape and gemm_ms
// The deck's other rules apply (the layout's, as gpt2 simulate checks them); its data files and the
// pass lists' proof are not needed for a prediction and are not checked.
// -- and gets one line of JSON on standard output: the id, the layout, step_ms, tokens_per_s, mfu,
// bubble, compute_ms, exposed_comm_ms, peak_memory_bytes, flops_per_token; or the id and "error"
// (this line's input error: the others still run). Exit status 0 when every line was predicted, 1
// when one was not.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "perf/step_model.hpp"
#include "train/run_config.hpp"

namespace gpt2::app {

namespace {
struct Row {
  std::string id, hardware;
  Precision precision = Precision::fp32;
  long long ranks = 0;
  std::vector<double> gemm;  // M, N, K[, batch]: price this GEMM instead of a step
  std::vector<std::pair<bool Layout::*, bool>> perf;
  std::vector<std::string> sets;
};

// The perf.* keys: how another trainer runs a layout (src/perf/layout.hpp says what each prices).
using LayoutFlag = bool Layout::*;  // (named: nvcc's host code parenthesises a bare member pointer)
struct PerfKey {
  const char* key;
  LayoutFlag member;
};
const std::vector<PerfKey> kPerfKeys = {{"perf.reduce_after_backward", &Layout::reduce_after_backward},
                                        {"perf.fused_attention", &Layout::fused_attention},
                                        {"perf.tp_comm_overlap", &Layout::tp_comm_overlap},
                                        {"perf.overlap_param_gather", &Layout::overlap_param_gather},
                                        {"perf.zero3_prefetch", &Layout::zero3_prefetch},
                                        {"perf.grad_all_reduce", &Layout::grad_all_reduce},
                                        {"perf.fp32_loss", &Layout::fp32_loss}};

Row parse_row(const std::string& line, const std::string& hardware, Precision precision) {
  Row r;
  r.hardware = hardware, r.precision = precision;
  std::istringstream in(line);
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) fail_input("--batch", "expected key=value, got \"", word, "\"");
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "id") r.id = value;
    else if (key == "hardware") r.hardware = value;
    else if (key == "precision") {
      if (!parse_word(value, r.precision) || r.precision == Precision::fp16)
        fail_input("--batch", "precision: expected fp32 or bf16, got \"", value, "\"");
    }
    else if (key == "ranks") {
      char* end = nullptr;
      r.ranks = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end || r.ranks < 1) fail_input("--batch", "ranks: expected a positive whole number, got \"", value, "\"");
    }
    else if (key == "gemm") {
      std::istringstream dims(value);
      for (std::string d; std::getline(dims, d, ',');) {
        char* end = nullptr;
        const double x = std::strtod(d.c_str(), &end);
        if (d.empty() || *end || !(x >= 1)) fail_input("--batch", "gemm: expected M,N,K[,BATCH] of positive numbers, got \"", value, "\"");
        r.gemm.push_back(x);
      }
      if (r.gemm.size() < 3 || r.gemm.size() > 4) fail_input("--batch", "gemm: expected M,N,K[,BATCH], got \"", value, "\"");
    }
    else if (key.rfind("perf.", 0) == 0) {
      const auto it = std::find_if(kPerfKeys.begin(), kPerfKeys.end(), [&](const PerfKey& k) { return key == k.key; });
      if (it == kPerfKeys.end())
        fail_input("--batch", "unknown key \"", key, "\" (perf.reduce_after_backward, perf.fused_attention, perf.tp_comm_overlap, "
                   "perf.overlap_param_gather, perf.zero3_prefetch, perf.grad_all_reduce, perf.fp32_loss)");
      if (value != "true" && value != "false") fail_input("--batch", key, ": expected true or false, got \"", value, "\"");
      r.perf.emplace_back(it->member, value == "true");
    }
    else if (key.find('.') != std::string::npos) r.sets.push_back(word);
    else fail_input("--batch", "unknown key \"", key, "\" (id, hardware, precision, ranks, gemm or section.key)");
  }
  return r;
}

const Hardware& loaded_hardware(const Row& row, std::map<std::string, Hardware>& hardware) {
  auto it = hardware.find(row.hardware);
  if (it == hardware.end()) it = hardware.emplace(row.hardware, Hardware::load(row.hardware)).first;
  return it->second;
}

std::string price_gemm(const std::string& config, const Row& row, std::map<std::string, Hardware>& hardware) {
  const Hardware& hw = loaded_hardware(row, hardware);
  if (!hw.supports(row.precision)) fail_input("precision", hw.file, " gives no peak for ", word(row.precision));
  const CostModel cm(RunConfig::load(config, {}).workload(), hw);
  const Gemm g{row.gemm[0], row.gemm[1], row.gemm[2], row.gemm.size() > 3 ? row.gemm[3] : 1.0};
  Json j;
  j.begin_object().key("id").value(row.id).key("m").value(g.m).key("n").value(g.n).key("k").value(g.k);
  j.key("batch").value(g.batch).key("gemm_ms").value(cm.gemm_seconds(g, row.precision) * 1e3).key("hardware").value(hw.file);
  j.end();
  return j.str();
}

std::string predict_row(const std::string& config, const Row& row, std::map<std::string, Hardware>& hardware) {
  if (!row.gemm.empty()) return price_gemm(config, row, hardware);
  RunConfig cfg = RunConfig::load(config, row.sets);
  if (row.ranks > 0) {
    const long long pt = (long long)cfg.parallel.pp * cfg.parallel.tp * cfg.parallel.cp;
    if (row.ranks % pt) fail_input("ranks", row.ranks, " ranks do not hold whole replicas of ", pt, " ranks");
    cfg.parallel.dp = int(row.ranks / pt);
  }
  ModelConfig shape = cfg.model;  // (the vocabulary's limit is the token files', not a shape's)
  shape.vocab_size = std::min(shape.vocab_size, 65536);
  shape.validate();
  if (cfg.data.seq_len < 1 || cfg.data.seq_len > cfg.model.block_size)
    fail_input("data.seq_len", "must be between 1 and model.block_size (", cfg.model.block_size, "), got ", cfg.data.seq_len);
  const Hardware& hw = loaded_hardware(row, hardware);
  Layout l = cfg.layout();
  l.precision = row.precision;
  for (const auto& [member, value] : row.perf) l.*member = value;
  if (!hw.supports(l.precision)) fail_input("precision", hw.file, " gives no peak for ", word(l.precision));
  const Workload w = cfg.workload();
  const CostModel cm(w, hw);
  const StepPrediction p = predict_step(cm, l);
  if (!p.valid()) fail_input(config, "this layout cannot run: ", p.problem);
  Json j;
  j.begin_object().key("id").value(row.id);
  j.key("layout").value(l.describe()).key("world_size").value(l.world());
  j.key("step_ms").value(p.step_s * 1e3).key("tokens_per_s").value(p.tokens_per_s).key("mfu").value(p.mfu);
  j.key("bubble").value(p.bubble).key("compute_ms").value(p.compute_s * 1e3);
  j.key("exposed_comm_ms").value(p.exposed_comm_s * 1e3).key("peak_memory_bytes").value(p.peak_memory());
  j.key("flops_per_token").value(flops_per_token(w)).key("hardware").value(hw.file);
  j.end();
  return j.str();
}
}  // namespace

int simulate_batch(const std::string& config, const std::string& file, const std::string& hardware,
                   Precision precision) {
  std::ifstream f;
  if (file != "-") {
    f.open(file);
    if (!f) fail_input(file, "cannot read the batch file");
  }
  std::istream& in = file == "-" ? std::cin : f;
  std::map<std::string, Hardware> loaded;
  int failed = 0;
  for (std::string line; std::getline(in, line);) {
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    std::string id;
    for (std::istringstream words(line); words >> id;)
      if (id.rfind("id=", 0) == 0) break;
    id = id.rfind("id=", 0) == 0 ? id.substr(3) : "";
    try {
      const Row row = parse_row(line, hardware.empty() ? default_hardware() : hardware, precision);
      id = row.id;
      std::printf("%s\n", predict_row(config, row, loaded).c_str());
    } catch (const InputError& e) {
      Json j;
      j.begin_object().key("id").value(id).key("error").value(e.what()).end();
      std::printf("%s\n", j.str().c_str());
      ++failed;
    }
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}

}  // namespace gpt2::app
