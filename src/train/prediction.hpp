#pragma once
// The planner's prediction of a run's own step (perf/step_model, what `gpt2 simulate` prints) made
// when the run starts, and held against what the run measured when it ends: a user sees at once
// whether the run is as fast as it should be, and which part is not.
//
// The prediction is priced from an earlier run's trace in this run's folder (trace.file, when one
// of the same model shape is there: a requeued or repeated job calibrates itself), else from the
// hardware file (train.hardware, else the device's: Hardware::file_for_device).
#include <string>
#include <vector>

namespace gpt2 {

struct RunConfig;

struct RunPrediction {
  std::string source;    // what it was priced from, in words; "" with no prediction
  std::string problem;   // why there is none ("" when there is one)
  double step_s = 0, tokens_per_s = 0;
  double compute_s = 0;       // the busiest stage's passes
  double exposed_comm_s = 0;  // what communication adds to the step
  std::vector<double> memory_bytes;  // per world rank: its model state, activations and workspace
  bool valid() const { return problem.empty(); }
};

// `device`: Environment::device() of this rank.
RunPrediction predict_run(const RunConfig& cfg, const std::string& device);

// What a rank measured over the run's timed steps.
struct RunMeasurement {
  double step_s = 0, tokens_per_s = 0;
  double compute_s = -1, comm_s = -1;  // a step's passes and communication (< 0: no trace to tell)
  double memory_bytes = 0;             // its most Kokkos memory at once (the prediction's memory)
  double rss_bytes = 0;                // its process's peak resident memory (host RSS)
};

// The line a run starts with, and the ones it ends with: measured against predicted (the largest
// rank's memory), and, where the step or the memory is off by more than `warn` (a fraction; 0:
// never), one line naming the part that is furthest off; without a prediction, the measurement
// alone. `ranks`: every rank's measurement.
std::string prediction_line(const RunPrediction& p);
std::vector<std::string> comparison_lines(const RunPrediction& p, const std::vector<RunMeasurement>& ranks,
                                          double warn);

}  // namespace gpt2
