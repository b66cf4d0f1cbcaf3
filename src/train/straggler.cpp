#include "train/straggler.hpp"

#include <Kokkos_Macros.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/json.hpp"
#include "tensor/device_counters.hpp"
#include "runtime/process_memory.hpp"

namespace gpt2 {

namespace {
constexpr size_t kMaxSamples = 1024;  // a rank's median is over at most this many steps of an interval
constexpr double kMinGapSeconds = 1e-3;  // a slow rank costs its peers more than this a step

double median_of(std::vector<double>& x) {  // (reorders x)
  if (x.empty()) return 0;
  const size_t mid = x.size() / 2;
  std::nth_element(x.begin(), x.begin() + long(mid), x.end());
  const double hi = x[mid];
  if (x.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(x.begin(), x.begin() + long(mid)));
}

void copy_name(char* to, size_t size, const std::string& from) {
  std::memset(to, 0, size);
  std::strncpy(to, from.c_str(), size - 1);
}
}  // namespace

std::vector<SlowRank> find_slow_ranks(const std::vector<double>& compute, const std::vector<int>& group, double ratio,
                                      double min_gap) {
  std::vector<SlowRank> slow;
  std::vector<double> peers;
  for (size_t r = 0; r < compute.size(); ++r) {
    if (!(compute[r] > 0)) continue;  // no timed step in this interval
    peers.clear();
    for (size_t q = 0; q < compute.size(); ++q)
      if (q != r && group[q] == group[r] && compute[q] > 0) peers.push_back(compute[q]);
    if (peers.empty()) continue;
    const double m = median_of(peers);
    if (compute[r] > ratio * m && compute[r] - m > min_gap) slow.push_back({int(r), compute[r], m});
  }
  return slow;
}

struct StragglerMonitor::Sample {
  double compute_s, wait_s;     // median compute a step, mean wait a step, over the interval
  double used_bytes, limit_bytes;
  int32_t steps, first_step;    // timed steps in the interval, and its first
};

StragglerMonitor::StragglerMonitor(const RunConfig& cfg, Environment& env, const Topology& topo, Communicator& world,
                                   Tracer& tracer)
    : cfg_(cfg), topo_(topo), world_(world), tracer_(tracer) {
  Who me;
  copy_name(me.host, sizeof(me.host), env.host());
  copy_name(me.device, sizeof(me.device), env.device());
  who_ = world_.host_gather_all(me);
  const double mb = cfg.train.memory_limit_mb;
  limit_ = mb > 0 ? mb * 1048576.0 : double(env.memory_limit_bytes());
  interval_.reserve(std::min<size_t>(size_t(std::max(cfg.train.straggler_every, 1)), kMaxSamples));
  warned_memory_.assign(size_t(world_.size()), 0);
  slow_since_.assign(size_t(world_.size()), 0);
  tracer_.time_passes(cfg.train.straggler_every > 0);
}

double StragglerMonitor::used_memory_bytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  return double(peak_kokkos_bytes());
#else
  return double(peak_rss_bytes());
#endif
}

const char* StragglerMonitor::used_memory_kind() {
#if defined(KOKKOS_ENABLE_CUDA)
  return "device";
#else
  return "host RSS";
#endif
}

void StragglerMonitor::after_step(const StepMetrics& m, bool timed, MetricsLog* log, bool quiet) {
  const int every = cfg_.train.straggler_every;
  if (timed && tracer_.timing()) {
    const double compute = m.compute_ms / 1e3, wait = m.wait_ms / 1e3;
    total_.compute += compute, total_.wait += wait, ++total_.steps;
    if (interval_.empty()) interval_start_ = tracer_.now() - m.step_ms / 1e3, interval_first_ = m.step;
    if (interval_.size() < interval_.capacity()) interval_.push_back(compute);
    else interval_[size_t(m.step) % interval_.size()] = compute;
    interval_wait_ += wait;
  }
  const bool due = (every > 0 && m.step % every == 0) || (!exchanged_ && (every > 0 || cfg_.train.memory_warn > 0));
  if (due) exchange(m.step, log, quiet);
}

void StragglerMonitor::exchange(int step, MetricsLog* log, bool quiet) {
  exchanged_ = true;
  const int steps = int(interval_.size());
  Sample mine{median_of(interval_), steps ? interval_wait_ / steps : 0, used_memory_bytes(), limit_, steps,
              interval_first_};
  const std::vector<Sample> all = world_.host_gather_all(mine);
  name_slow(all, step, log, quiet);
  name_full(all, step, log, quiet);
  interval_.clear(), interval_wait_ = 0;
}

std::string StragglerMonitor::describe(int rank) const {
  const GridCoords c = Topology::coords_of(topo_.shape(), rank);
  std::string at = "dp " + std::to_string(c.dp) + ", stage " + std::to_string(c.pp);
  if (topo_.cp() > 1) at += ", cp " + std::to_string(c.cp);
  if (topo_.tp() > 1) at += ", tp " + std::to_string(c.tp);
  const Who& w = who_[size_t(rank)];
  return "rank " + std::to_string(rank) + " (host " + w.host + ", " + w.device + ", " + at + ")";
}

void StragglerMonitor::name_slow(const std::vector<Sample>& all, int step, MetricsLog* log, bool quiet) {
  if (cfg_.train.straggler_every <= 0) return;
  std::vector<double> compute;
  std::vector<int> stage;
  for (size_t r = 0; r < all.size(); ++r) {
    compute.push_back(all[r].compute_s);
    stage.push_back(Topology::coords_of(topo_.shape(), int(r)).pp);
  }
  std::vector<int> now(all.size(), 0);  // slow in this interval: its first step (0: not slow)
  for (const SlowRank& s : find_slow_ranks(compute, stage, cfg_.train.straggler_ratio, kMinGapSeconds)) {
    const Sample& x = all[size_t(s.rank)];
    now[size_t(s.rank)] = x.first_step;
    const int since = slow_since_[size_t(s.rank)];  // slow in the interval before too: named
    if (since == 0) continue;
    if (s.rank == world_.rank()) tracer_.record(EventKind::straggler, step, -1, slow_start_, tracer_.now());
    if (world_.rank() == 0) report_slow(s, x.wait_s, since, step, log, quiet);
  }
  const size_t me = size_t(world_.rank());
  if (now[me] && !slow_since_[me]) slow_start_ = interval_start_;
  for (size_t r = 0; r < now.size(); ++r) slow_since_[r] = now[r] ? (slow_since_[r] ? slow_since_[r] : now[r]) : 0;
  std::fflush(stdout);
}

void StragglerMonitor::report_slow(const SlowRank& s, double wait_s, int since, int step, MetricsLog* log,
                                   bool quiet) const {
  const GridCoords c = Topology::coords_of(topo_.shape(), s.rank);
  if (log) {
    Json j;
    j.begin_object().key("straggler").begin_object().key("rank").value(s.rank);
    j.key("host").value(who_[size_t(s.rank)].host).key("device").value(who_[size_t(s.rank)].device);
    j.key("coords").begin_object().key("dp").value(c.dp).key("pp").value(c.pp).key("cp").value(c.cp);
    j.key("tp").value(c.tp).end();
    j.key("ratio").value(s.compute_s / s.peers_s).key("compute_ms").value(s.compute_s * 1e3);
    j.key("peers_ms").value(s.peers_s * 1e3).key("wait_ms").value(wait_s * 1e3);
    j.key("steps").begin_array().value(since).value(step).end().end().end();
    log->line(j.str());
  }
  if (!quiet)
    std::printf("gpt2 train: slow %s: compute %.2fx its peers' median (%.1f vs %.1f ms a step) over steps %d-%d\n",
                describe(s.rank).c_str(), s.compute_s / s.peers_s, s.compute_s * 1e3, s.peers_s * 1e3, since, step);
}

void StragglerMonitor::name_full(const std::vector<Sample>& all, int step, MetricsLog* log, bool quiet) {
  const double warn = cfg_.train.memory_warn;
  if (!(warn > 0)) return;
  for (size_t r = 0; r < all.size(); ++r) {
    const Sample& x = all[r];
    if (warned_memory_[r] || !(x.limit_bytes > 0) || x.used_bytes <= warn * x.limit_bytes) continue;
    warned_memory_[r] = 1;
    if (world_.rank() != 0) continue;
    if (log) {
      Json j;
      j.begin_object().key("memory_warning").begin_object().key("rank").value(int(r));
      j.key("host").value(who_[r].host).key("used_bytes").value(x.used_bytes).key("limit_bytes").value(x.limit_bytes);
      j.key("step").value(step).end().end();
      log->line(j.str());
    }
    if (!quiet)
      std::printf("gpt2 train: %s is near its memory limit: peak %.1f of %.1f MiB (%.0f%%) after step %d%s\n",
                  describe(int(r)).c_str(), x.used_bytes / 1048576.0, x.limit_bytes / 1048576.0,
                  100.0 * x.used_bytes / x.limit_bytes, step,
                  cfg_.train.memory_limit_mb > 0 ? " (train.memory_limit_mb)" : "");
  }
  std::fflush(stdout);
}

}  // namespace gpt2
