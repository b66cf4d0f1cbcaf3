// Trainer: initial state (fresh init, our checkpoint, llm.c weights), checkpoints and the run loop.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "model/checkpoint.hpp"
#include "model/llmc_io.hpp"
#include "runtime/collective.hpp"
#include "train/sampler.hpp"
#include "train/trainer.hpp"
#include "trace/hdf5_trace.hpp"

namespace gpt2 {

namespace {
using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
constexpr int kTagParams = 900;

std::string latest_path(const std::string& dir) { return dir + "/latest"; }

// Name of the newest checkpoint in dir (from dir/latest), or empty.
std::string latest_checkpoint(const std::string& dir) {
  if (!file_exists(latest_path(dir))) return "";
  std::string name = read_file(latest_path(dir));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name.empty() ? "" : dir + "/" + name;
}

// AtomicFile's temporaries of checkpoints ("ckpt_NNNNNNNN.bin.tmp.<pid>") and of dir/latest
// ("latest.tmp.<pid>") whose writer is dead are left behind by a crash (SIGKILL, node failure) and
// would accumulate one per crash: remove them. A writer counts as dead when no process has its pid
// here (or the pid is ours: we have not written yet); a live pid's file is kept, as it may belong
// to another run writing into the same folder (or the pid was reused: the file is merely kept).
void remove_dead_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    size_t at = std::string::npos;
    if (name.rfind("ckpt_", 0) == 0 && name.find(".bin.tmp.") != std::string::npos)
      at = name.find(".bin.tmp.") + 9;
    else if (name.rfind("latest.tmp.", 0) == 0)
      at = 11;
    if (at == std::string::npos || at >= name.size() || at + 9 < name.size() ||
        name.find_first_not_of("0123456789", at) != std::string::npos)
      continue;
    const pid_t pid = pid_t(std::stol(name.substr(at)));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale)
    if (std::remove((dir + "/" + name).c_str()) == 0)
      std::printf("checkpoint: removed %s/%s (left by a writer that died)\n", dir.c_str(), name.c_str());
  std::fflush(stdout);
}

void copy_to_device(const Vec<float>& dst, const std::vector<float>& src) {
  Kokkos::deep_copy(dst, HostFloats(const_cast<float*>(src.data()), src.size()));
}
}  // namespace

void Trainer::load_initial_state() {
  const auto& ck = cfg_.checkpoint;
  if (rank_ == 0 && !ck.dir.empty()) remove_dead_temporaries(ck.dir);
  std::string resume_from;
  if (ck.resume) resume_from = latest_checkpoint(ck.dir);
  if (!resume_from.empty()) {
    read_checkpoint(resume_from, true);
    if (rank_ == 0) std::printf("resuming from %s at step %lld\n", resume_from.c_str(), (long long)step_);
  } else if (!ck.init_from.empty()) {
    read_checkpoint(ck.init_from, false);
    if (rank_ == 0) std::printf("initialised from %s\n", ck.init_from.c_str());
  } else {
    stage_->init_params(uint64_t(cfg_.train.seed));
  }
}

// Reads this stage's part (its owned range, plus wte into a tied copy) of a native checkpoint or an
// llm.c model file. Every rank reads the file itself; rank 0 also verifies the checksums.
void Trainer::read_checkpoint(const std::string& path, bool with_optimizer) {
  const StageLayout& L = stage_->layout();
  const Range own = L.owned();
  const size_t tied = L.tied_size(), n = L.local_size();
  auto load = [&](const std::function<void(size_t begin, size_t count, float* dst)>& read,
                  const Vec<float>& dst) {
    std::vector<float> host(n);
    if (tied) read(0, tied, host.data());  // wte, for the tied LM head
    read(own.begin, own.size(), host.data() + tied);
    copy_to_device(dst, host);
  };
  const std::string key = with_optimizer ? "checkpoint.resume" : "checkpoint.init_from";
  if (!file_exists(path)) fail_input(key, "no such file: ", path);
  if (is_llmc_model(path)) {
    if (with_optimizer) fail_input(path, "is an llm.c model file; resume needs a gpt2-kokkos checkpoint");
    LlmcModel m = read_llmc_model(path);
    if (!(m.config == cfg_.model))
      fail_input(path, "model differs from the configuration (file vs config): ", m.config.diff(cfg_.model));
    load([&](size_t b, size_t c, float* d) { std::copy(m.params.begin() + b, m.params.begin() + b + c, d); },
         Vec<float>(stage_->params.data(), n));
    return;
  }
  if (!is_native_checkpoint(path))
    fail_input(path, "is neither a gpt2-kokkos checkpoint nor an llm.c model file (bad magic)");
  CheckpointReader r(path);
  if (!(r.meta().model == cfg_.model))
    fail_input(path, "model differs from the configuration (checkpoint vs config): ",
               r.meta().model.diff(cfg_.model));
  if (rank_ == 0) r.verify();
  load([&](size_t b, size_t c, float* d) { r.read("params", b, c, d); }, Vec<float>(stage_->params.data(), n));
  if (!with_optimizer) return;
  if (r.meta().optimizer != opt_->name())
    fail_input(path, "holds no ", opt_->name(), " state (optimizer \"", r.meta().optimizer, "\")");
  for (auto& [name, buf] : opt_->state())
    load([&, name = name](size_t b, size_t c, float* d) { r.read("opt." + name, b, c, d); }, buf);
  step_ = r.meta().step;
  opt_->set_steps_taken(step_);
  sample_rng_.set_state(r.meta().rng);
}

// Stage s of dp replica 0 sends its owned range to world rank 0, which returns the whole buffer.
std::vector<float> Trainer::gather_section(const Vec<float>& local) {
  const StageLayout& L = stage_->layout();
  const size_t tied = L.tied_size();
  std::vector<float> out;
  if (topo_->dp_rank() != 0) return out;
  std::vector<float> mine(L.owned().size());
  Kokkos::deep_copy(HostFloats(mine.data(), mine.size()), Vec<float>(local.data() + tied, mine.size()));
  if (topo_->stage() != 0) {
    MPI_Request r;
    MPI_Isend(mine.data(), int(mine.size()), MPI_FLOAT, 0, kTagParams, topo_->pipe_comm(), &r);
    mpi_wait(r, "checkpoint send to rank 0", 0);
    return out;
  }
  out = std::move(mine);
  size_t offset = out.size();
  out.resize(layout_->total());
  for (int s = 1; s < topo_->pp(); ++s) {
    // Stage s sends exactly its owned range: the layout says how long that is.
    const int first = std::accumulate(stage_layers_.begin(), stage_layers_.begin() + s, 0);
    const size_t count = StageLayout(*layout_, first, first + stage_layers_[s]).owned().size();
    if (offset + count > out.size()) fail("gather: stage ", s, " would overflow the parameter buffer");
    MPI_Request r;
    MPI_Irecv(out.data() + offset, int(count), MPI_FLOAT, s, kTagParams, topo_->pipe_comm(), &r);
    mpi_wait(r, "checkpoint receive", s);
    offset += count;
  }
  if (offset != out.size()) fail("gather: stages returned ", offset, " of ", out.size(), " parameters");
  return out;
}

std::vector<float> Trainer::gather_params() {
  return gather_section(Vec<float>(stage_->params.data(), stage_->params.extent(0)));
}

void Trainer::save_checkpoint() {
  if (cfg_.checkpoint.dir.empty()) return;
  Tracer::Scope t(tracer_, EventKind::checkpoint, int(step_));
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt_%08lld.bin", (long long)step_);
  const std::string path = cfg_.checkpoint.dir + "/" + name;
  CheckpointMeta meta;
  meta.model = cfg_.model;
  meta.step = step_;
  meta.rng = sample_rng_.state();
  meta.config_toml = cfg_.toml();
  meta.optimizer = opt_->name();
  std::vector<std::pair<std::string, Vec<float>>> sections = {
      {"params", Vec<float>(stage_->params.data(), stage_->params.extent(0))}};
  for (auto& s : opt_->state()) sections.push_back({"opt." + s.first, s.second});
  std::unique_ptr<CheckpointWriter> w;
  std::vector<std::string> names;
  for (auto& s : sections) names.push_back(s.first);
  if (rank_ == 0) w = std::make_unique<CheckpointWriter>(path, meta, layout_->total(), names);
  for (auto& s : sections) {
    std::vector<float> all = gather_section(s.second);
    if (w) w->append(all.data(), all.size());
  }
  if (w) {
    w->commit();
    AtomicFile latest(latest_path(cfg_.checkpoint.dir));
    latest.write(name, std::strlen(name));
    latest.write("\n", 1);
    latest.commit();
    std::printf("checkpoint: %s\n", path.c_str());
    std::fflush(stdout);
  }
}

void Trainer::write_trace() {
  if (cfg_.trace.file.empty()) return;
  TraceMeta meta;
  meta.config_toml = cfg_.toml();
  meta.world_size = topo_->world_size();
  meta.dp = topo_->dp(), meta.pp = topo_->pp();
  meta.microbatches = cfg_.parallel.microbatches;
  meta.schedule = cfg_.parallel.schedule;
  meta.execution_space = env_.execution_space();
  meta.device = env_.device();
  meta.comm = comm_backend_;
  meta.blas_threads = blas_threads_;
  meta.stage_layers = stage_layers_;
  meta.tokens_per_step = cfg_.train.batch_size * cfg_.data.seq_len;
  meta.num_params = int64_t(layout_->total());
  meta.model = cfg_.model;
  meta.seq_len = cfg_.data.seq_len;
  meta.batch_size = cfg_.train.batch_size;
  meta.param_bytes = double(param_bytes());
  meta.activation_bytes = double(activation_bytes());
  meta.steps = cfg_.train.steps;
  meta.batches_per_epoch = train_loader_->batches_per_epoch();
  meta.train_tokens = int64_t(train_data_->num_tokens());
  write_hdf5_trace(cfg_.trace.file, comm_, meta, tracer_, history_);
}

void Trainer::maybe_sample() {
  const int every = cfg_.train.sample_every;
  if (every <= 0 || step_ % every != 0) return;
  if (topo_->pp() > 1) {
    static bool told = false;
    if (rank_ == 0 && !told) std::printf("(samples during training need parallel.pp = 1; use gpt2 sample)\n");
    told = true;
    return;
  }
  if (rank_ != 0) return;
  std::unique_ptr<Tokenizer> tok = make_sample_tokenizer(cfg_.data.tokenizer, cfg_.model.vocab_size);
  const std::vector<int> prompt = {tok->eot() >= 0 ? tok->eot() : int('\n')};
  SampleOptions so;
  so.tokens = cfg_.train.sample_tokens;
  const std::vector<int> out = generate(*stage_, prompt, so, sample_rng_);
  std::printf("--- sample at step %lld ---\n%s\n---\n", (long long)step_, tok->decode(out).c_str());
  std::fflush(stdout);
}

void Trainer::run() {
  const auto& t = cfg_.train;
  const bool root = rank_ == 0;
  if (root && !opts_.quiet) {
    std::printf("gpt2 train: %s | %d ranks (dp %d x pp %d, %s, %s) | %s, %d BLAS threads/rank\n",
                cfg_.model.describe().c_str(), topo_->world_size(), topo_->dp(), topo_->pp(),
                cfg_.parallel.schedule.c_str(), comm_backend_.c_str(), env_.execution_space().c_str(),
                blas_threads_);
    std::printf("params %.2fM | batch %lld x %d tokens | %d microbatch(es) of %d per rank | %lld batches/epoch\n",
                layout_->total() / 1e6, (long long)t.batch_size, cfg_.data.seq_len,
                cfg_.parallel.microbatches, mb_size_, (long long)train_loader_->batches_per_epoch());
    std::fflush(stdout);
  }
  double time_sum = 0, tok_sum = 0, rank_tok_sum = 0;
  int timed = 0;
  const int64_t first = step_;
  const int64_t end = opts_.stop_at > 0 ? std::min<int64_t>(opts_.stop_at, t.steps) : t.steps;
  while (step_ < end) {
    StepMetrics m = train_step();
    if (step_ > first + 1 || t.steps - first == 1) {  // the first step includes warm-up costs
      time_sum += m.step_ms / 1e3, tok_sum += m.tokens_per_s, rank_tok_sum += m.rank_tokens_per_s;
      ++timed;
    }
    const bool last = step_ == end;
    if (val_loader_ && ((t.eval_every > 0 && step_ % t.eval_every == 0) || last)) m.val_loss = evaluate();
    // The trace's /metrics needs every step; without a trace only the last one is used (the final
    // loss), and keeping them all grew every rank's memory by 64 bytes a step without end.
    if (cfg_.trace.file.empty() && !history_.empty())
      history_.back() = m;
    else
      history_.push_back(m);
    if (root) {
      log_->step(m);
      if (m.val_loss >= 0) log_->eval(m.step, m.val_loss);
      if (!opts_.quiet && (step_ % t.log_every == 0 || last || step_ == first + 1)) {
        const double mean = timed ? time_sum / timed : m.step_ms / 1e3;
        std::printf("%s\n", progress_line(m, t.steps, mean * double(t.steps - step_)).c_str());
        if (m.val_loss >= 0) std::printf("step %d | val loss %.4f\n", m.step, m.val_loss);
        std::fflush(stdout);
      }
    }
    maybe_sample();
    const bool ckpt = !cfg_.checkpoint.dir.empty() &&
                      ((cfg_.checkpoint.every > 0 && step_ % cfg_.checkpoint.every == 0) || last);
    if (ckpt) {
      save_checkpoint();
      write_trace();
    }
  }
  if (cfg_.checkpoint.dir.empty() || step_ == first) write_trace();
  print_summary(timed ? time_sum / timed : 0, timed ? tok_sum / timed : 0, timed ? rank_tok_sum / timed : 0);
}

// Collective: every rank's throughput and memory, printed by rank 0.
void Trainer::print_summary(double step_s, double tok_s, double rank_tok_s) {
  struct RankStats {
    double step_s, tok_s, param_mib, act_mib, peak_mb;
  } mine{step_s, rank_tok_s, param_bytes() / 1048576.0, activation_bytes() / 1048576.0,
         double(exec_->peak_slots())};
  std::vector<RankStats> all(static_cast<size_t>(size_));
  MPI_Request req;
  MPI_Igather(&mine, 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, 0, comm_, &req);
  mpi_wait(req, "summary gather");
  if (rank_ != 0 || opts_.quiet || step_s <= 0) return;
  std::printf("done: %lld steps | mean step %.1f ms | %.0f tok/s in all (sum over dp ranks) | time per epoch %s\n",
              (long long)step_, step_s * 1e3, tok_s,
              format_duration(step_s * train_loader_->batches_per_epoch()).c_str());
  for (int r = 0; r < size_ && r < 16; ++r) {
    const RankStats& s = all[size_t(r)];
    std::printf("  rank %d (dp %d, stage %d): %.0f tok/s on its data, time per epoch %s | params %.1f MiB | "
                "peak activations %.1f MiB (%.0f microbatches)\n",
                r, r / topo_->pp(), r % topo_->pp(), s.tok_s,
                format_duration(s.step_s * train_loader_->batches_per_epoch()).c_str(), s.param_mib, s.act_mib,
                s.peak_mb);
  }
  if (size_ > 16) std::printf("  (%d more ranks)\n", size_ - 16);
  if (!history_.empty()) std::printf("final loss %.4f\n", history_.back().loss);
  std::fflush(stdout);
}

}  // namespace gpt2
