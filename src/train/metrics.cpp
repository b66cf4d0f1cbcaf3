#include "train/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace gpt2 {

MetricsLog::MetricsLog(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) fail_input(path, "cannot write the metrics file: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::step(const StepMetrics& m) {
  if (!f_) return;
  std::fprintf(f_,
               "{\"step\": %d, \"loss\": %.17g, \"lr\": %.17g, \"grad_norm\": %.17g, \"step_ms\": %.6g, "
               "\"tokens_per_s\": %.6g}\n",
               m.step, m.loss, m.lr, m.grad_norm, m.step_ms, m.tokens_per_s);
  std::fflush(f_);
}

void MetricsLog::eval(int step, double val_loss) {
  if (!f_) return;
  std::fprintf(f_, "{\"step\": %d, \"val_loss\": %.17g}\n", step, val_loss);
  std::fflush(f_);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) s = 0;
  const long t = long(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

std::string progress_line(const StepMetrics& m, int total, double eta) {
  char buf[256];
  const int w = int(std::to_string(total).size());
  std::snprintf(buf, sizeof(buf),
                "step %*d/%d | loss %.4f | lr %.2e | norm %.3f | %8.1f ms | %9.0f tok/s | ETA %s",
                w, m.step, total, m.loss, m.lr, m.grad_norm, m.step_ms, m.tokens_per_s,
                format_duration(eta).c_str());
  return buf;
}

}  // namespace gpt2
