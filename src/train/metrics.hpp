#pragma once
// What a step reports, how rank 0 prints it, and the optional JSON-lines log.
#include <cstdio>
#include <string>

namespace gpt2 {

struct StepMetrics {
  int step = 0;                 // 1-based
  double loss = 0;              // global mean loss of this step's forward (before its update)
  double lr = 0;
  double grad_norm = 0;         // before clipping
  double step_ms = 0;
  double tokens_per_s = 0;      // whole job
  double rank_tokens_per_s = 0; // this rank's share (its dp slice)
  double val_loss = -1;         // < 0: not evaluated at this step
  bool skipped = false;         // update skipped: not finite (train.nonfinite), or an fp16 overflow
  double loss_scale = 1;        // the loss scale the step ran with (fp16; 1 otherwise)
  double compute_ms = 0;        // this rank's passes, less their waits (Tracer::PassTimes; 0: not timed)
  double wait_ms = 0;           // and its communication waits
};

class MetricsLog {
 public:
  // path empty: no JSONL file. InputError naming the path if it cannot be written. A run that
  // resumed after step `resumed` keeps the file's lines up to that step and appends to them (the
  // lines of steps it repeats go); a fresh run (0) starts the file anew.
  explicit MetricsLog(const std::string& jsonl_path, long long resumed = 0);
  ~MetricsLog();
  void step(const StepMetrics& m);
  void eval(int step, double val_loss);
  // A BLEU evaluation (train.bleu_pairs) after step `step`, in epoch `epoch` (1-based, fractional
  // when train.bleu_every does not fall on an epoch's end), with the training time and tokens/s
  // of the steps since the last one.
  void bleu(int step, double epoch, double bleu, double train_s, double tokens_per_s, double elapsed_s);
  // A line of its own: one JSON object (the run's prediction and its measurement, train/prediction.hpp).
  void line(const std::string& json_object);

 private:
  void flush();  // WriteError naming the file when a line could not be written (a full disk)
  std::string path_;
  std::FILE* f_ = nullptr;
};

// "step   12/100 | loss 3.4521 | lr 3.00e-04 | norm 1.234 | 123.4 ms | 12,345 tok/s | ETA 0:01:23"
std::string progress_line(const StepMetrics& m, int total_steps, double eta_seconds);
std::string format_duration(double seconds);

}  // namespace gpt2
