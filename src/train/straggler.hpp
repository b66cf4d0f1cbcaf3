#pragma once
// Slow ranks named while the run goes (train.straggler_every), and ranks near their memory limit
// (train.memory_warn). Each rank keeps the compute and wait seconds of its steps (the Tracer's pass
// times: measured inside the step, read after it). Every straggler_every steps the ranks exchange
// their median compute a step, their mean wait and their peak memory in one small all-gather
// outside the timed step, and every rank reaches the same verdict:
//   - a rank whose median compute exceeds straggler_ratio times the median of its peers' (the other
//     ranks of its pipeline stage: the same blocks, the same passes) in two intervals in a row is
//     named, with its host, device, grid coordinates, ratio and steps (and again after each further
//     interval it stays slow); its own trace gets a `straggler` event over those steps;
//   - a rank whose peak memory (host RSS; Kokkos' peak on a GPU) passes memory_warn of its limit is
//     named once, after the first step or at the next exchange.
// A rank's median step rather than its mean, and two intervals: one descheduled moment, or one
// unlucky interval on a shared core, does not name anybody.
#include <cstdint>
#include <string>
#include <vector>

#include "plugins/communicator.hpp"
#include "runtime/environment.hpp"
#include "runtime/topology.hpp"
#include "trace/tracer.hpp"
#include "train/metrics.hpp"
#include "train/run_config.hpp"

namespace gpt2 {

struct SlowRank {
  int rank;
  double compute_s, peers_s;  // its median compute a step, and its peers' median of theirs
};
// The ranks whose compute[r] exceeds `ratio` times the median of the other ranks of group[r], and by
// more than min_gap seconds (a rank that costs its peers less than that a step is not worth naming:
// on tiny steps a core's scheduling noise alone passes any ratio); a rank alone in its group is
// never named.
std::vector<SlowRank> find_slow_ranks(const std::vector<double>& compute, const std::vector<int>& group, double ratio,
                                      double min_gap = 0);

class StragglerMonitor {
 public:
  // Collective (every rank's host and device are gathered once).
  StragglerMonitor(const RunConfig& cfg, Environment& env, const Topology& topo, Communicator& world, Tracer& tracer);
  // Every rank after each step of the run (timed: not its first, which pays the warm-up): collective
  // at the exchanges. Rank 0 prints (unless quiet) and logs (log: rank 0's, or null) what they find.
  void after_step(const StepMetrics& m, bool timed, MetricsLog* log, bool quiet);
  // This rank's mean compute and wait a step over the timed steps (0 when pass timing is off).
  double compute_s() const { return total_.steps ? total_.compute / total_.steps : 0; }
  double wait_s() const { return total_.steps ? total_.wait / total_.steps : 0; }
  static double used_memory_bytes();  // host RSS peak; Kokkos' peak on a GPU
  static const char* used_memory_kind();  // "host RSS" or "device"

 private:
  struct Sample;  // one rank's share of an exchange
  struct Who {    // a rank's names, gathered once
    char host[64], device[96];
  };
  void exchange(int step, MetricsLog* log, bool quiet);
  void name_slow(const std::vector<Sample>& all, int step, MetricsLog* log, bool quiet);
  void report_slow(const SlowRank& s, double wait_s, int since, int step, MetricsLog* log, bool quiet) const;
  void name_full(const std::vector<Sample>& all, int step, MetricsLog* log, bool quiet);
  std::string describe(int rank) const;  // "rank 3 (host h, device d, dp 1, stage 0)"

  const RunConfig& cfg_;
  const Topology& topo_;
  Communicator& world_;
  Tracer& tracer_;
  std::vector<Who> who_;
  double limit_ = 0;                    // this rank's memory limit in bytes (0: unknown)
  std::vector<double> interval_;        // the compute seconds of this interval's timed steps
  double interval_wait_ = 0, interval_start_ = -1;
  int interval_first_ = 0;              // its first step
  std::vector<char> warned_memory_;     // by rank
  std::vector<int> slow_since_;         // by rank: the first step of the slow intervals in a row up to the last (0: none)
  double slow_start_ = -1;              // when this rank's own slow intervals began
  struct {
    double compute = 0, wait = 0;
    int steps = 0;
  } total_;
  bool exchanged_ = false;              // the first exchange (memory after step 1) is done
};

}  // namespace gpt2
