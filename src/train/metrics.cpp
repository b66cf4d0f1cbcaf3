#include "train/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/fs.hpp"

namespace gpt2 {

namespace {
// The step a metrics line is about ({"step": N, ...}), or -1.
long long line_step(const std::string& line) {
  const size_t at = line.find("\"step\": ");
  return at == std::string::npos ? -1 : std::atoll(line.c_str() + at + 8);
}

// JSON has no NaN or infinity: a non-finite value is written as null.
std::string number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path, long long resumed) : path_(path) {
  if (path.empty()) return;
  std::string kept;
  if (resumed > 0) {
    if (std::FILE* in = std::fopen(path.c_str(), "r")) {
      char buf[4096];
      std::string line;
      while (std::fgets(buf, sizeof(buf), in)) {
        line += buf;
        if (line.back() != '\n') continue;
        const long long s = line_step(line);
        if (s >= 0 && s <= resumed) kept += line;
        line.clear();
      }
      std::fclose(in);
    }
  }
  if (resumed > 0) {  // the kept lines replace the file at once: a crash now loses none of them
    AtomicFile out(path);
    out.write(kept.data(), kept.size());
    out.commit();
  }
  f_ = std::fopen(path.c_str(), resumed > 0 ? "a" : "w");
  if (!f_) fail_input(path, "cannot write the metrics file: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::step(const StepMetrics& m) {
  if (!f_) return;
  std::fprintf(f_,
               "{\"step\": %d, \"loss\": %s, \"lr\": %.17g, \"grad_norm\": %s, \"step_ms\": %.6g, "
               "\"tokens_per_s\": %.6g, \"skipped\": %s, \"loss_scale\": %.17g}\n",
               m.step, number(m.loss).c_str(), m.lr, number(m.grad_norm).c_str(), m.step_ms, m.tokens_per_s,
               m.skipped ? "true" : "false", m.loss_scale);
  flush();
}

void MetricsLog::flush() {
  if (std::ferror(f_) || std::fflush(f_) != 0) fail_write(path_, "write failed: ", std::strerror(errno));
}

void MetricsLog::eval(int step, double val_loss) {
  if (!f_) return;
  std::fprintf(f_, "{\"step\": %d, \"val_loss\": %s}\n", step, number(val_loss).c_str());
  flush();
}

void MetricsLog::bleu(int step, double epoch, double bleu, double train_s, double tokens_per_s, double elapsed_s) {
  if (!f_) return;
  std::fprintf(f_,
               "{\"step\": %d, \"epoch\": %.6g, \"bleu\": %s, \"train_s\": %.6g, \"tokens_per_s\": %.6g, "
               "\"elapsed_s\": %.6g}\n",
               step, epoch, number(bleu).c_str(), train_s, tokens_per_s, elapsed_s);
  flush();
}

void MetricsLog::line(const std::string& json_object) {
  if (!f_) return;
  std::fprintf(f_, "%s\n", json_object.c_str());
  flush();
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
