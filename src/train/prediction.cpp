#include "train/prediction.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>

#include "perf/calibration.hpp"
#include "perf/step_model.hpp"
#include "train/run_config.hpp"

namespace gpt2 {

namespace {
// An earlier run's trace at trace.file with this model's shape, or null (none there, or another
// shape, or not a finished trace: the prediction then comes from the hardware alone).
std::unique_ptr<Calibration> earlier_trace(const RunConfig& cfg) {
  const std::string& path = cfg.trace.file;
  if (path.empty() || !std::ifstream(path)) return nullptr;
  try {
    auto cal = std::make_unique<Calibration>(Calibration::load(path));
    cal->require_shape(cfg.model, cfg.data.seq_len, path);
    return cal;
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char line[256];
  std::snprintf(line, sizeof(line), fmt, a, b, c);
  return line;
}
double mib(double b) { return b / 1048576.0; }
double off(double measured, double predicted) { return predicted > 0 ? measured / predicted - 1 : 0; }
}  // namespace

RunPrediction predict_run(const RunConfig& cfg, const std::string& device) {
  RunPrediction r;
  try {
    const std::string file = cfg.train.hardware.empty() ? Hardware::file_for_device(device) : cfg.train.hardware;
    Hardware hw = Hardware::load(file);
    std::unique_ptr<Calibration> cal = earlier_trace(cfg);
    if (cal) cal->apply_node_size(hw);
    const Layout l = cfg.layout();
    if (!cal && !hw.supports(l.precision)) {
      r.problem = file + " gives no " + word(l.precision) + " peak";
      return r;
    }
    const CostModel cm(cfg.workload(), hw, cal.get());
    const StepPrediction p = predict_step(cm, l);
    if (!p.valid()) {
      r.problem = p.problem;
      return r;
    }
    r.source = cal ? "the earlier run's trace " + cfg.trace.file + ", on " + file : file + ", uncalibrated";
    r.step_s = p.step_s, r.tokens_per_s = p.tokens_per_s, r.compute_s = p.compute_s;
    r.exposed_comm_s = p.exposed_comm_s, r.memory_bytes = p.memory_per_rank();
  } catch (const std::exception& e) {
    r.problem = e.what();
  }
  return r;
}

std::string prediction_line(const RunPrediction& p) {
  if (!p.valid()) return "predicted: none (" + p.problem + ")";
  const double peak = p.memory_bytes.empty() ? 0 : *std::max_element(p.memory_bytes.begin(), p.memory_bytes.end());
  return format("predicted: step %.1f ms, %.0f tokens/s, %.1f MiB on the largest rank", p.step_s * 1e3,
                p.tokens_per_s, mib(peak)) +
         " (" + p.source + ")";
}

std::vector<std::string> comparison_lines(const RunPrediction& p, const std::vector<RunMeasurement>& ranks,
                                          double warn) {
  if (ranks.empty() || !(ranks[0].step_s > 0)) return {};
  const RunMeasurement& first = ranks[0];
  if (!p.valid())  // (the measurement all the same)
    return {format("measured: step %.1f ms, %.0f tokens/s, ", first.step_s * 1e3, first.tokens_per_s) +
            format("%.1f MiB on rank 0, no prediction to hold it against", mib(first.memory_bytes))};
  double memory = 0, rss = 0, compute = -1, comm = -1;
  for (const RunMeasurement& m : ranks) {
    memory = std::max(memory, m.memory_bytes), rss = std::max(rss, m.rss_bytes);
    compute = std::max(compute, m.compute_s), comm = std::max(comm, m.comm_s);
  }
  const double predicted_memory = *std::max_element(p.memory_bytes.begin(), p.memory_bytes.end());
  const double step_off = off(first.step_s, p.step_s), memory_off = off(memory, predicted_memory);
  std::vector<std::string> lines{
      format("measured against predicted: step %.1f ms against %.1f (%+.1f%%), ", first.step_s * 1e3, p.step_s * 1e3,
             100 * step_off) +
      format("%.0f tokens/s against %.0f; memory %.1f MiB", first.tokens_per_s, p.tokens_per_s, mib(memory)) +
      format(" against %.1f on the largest rank (%+.1f%%)", mib(predicted_memory), 100 * memory_off) +
      (rss > 0 ? format("; peak RSS %.1f MiB", mib(rss)) : std::string())};
  if (warn <= 0 || (std::abs(step_off) <= warn && std::abs(memory_off) <= warn)) return lines;
  std::string part;
  if (std::abs(memory_off) > std::abs(step_off))
    part = format("memory (%.1f MiB against %.1f)", mib(memory), mib(predicted_memory));
  else if (compute < 0)
    part = "the step (trace.file would split it into passes and communication)";
  else if (std::abs(compute - p.compute_s) >= std::abs(comm - p.exposed_comm_s))
    part = format("the passes (%.1f ms a step on the busiest rank against %.1f)", compute * 1e3, p.compute_s * 1e3);
  else
    part = format("communication (%.1f ms a step of waits on a rank against %.1f exposed)", comm * 1e3,
                  p.exposed_comm_s * 1e3);
  lines.push_back(format("prediction off by more than %.0f%%: the largest part off is ", 100 * warn) + part);
  return lines;
}

}  // namespace gpt2
