// Trainer: what the run writes (checked before step 1), the initial state (fresh init, our
// checkpoint, llm.c weights) and checkpoints.
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "model/checkpoint_dir.hpp"
#include "runtime/collective.hpp"
#include "model/model_file.hpp"
#include "train/trainer.hpp"

namespace gpt2 {

namespace {
using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
constexpr int kTagParams = 900;

void copy_to_device(const Vec<float>& dst, const std::vector<float>& src) {
  Kokkos::deep_copy(dst, HostFloats(const_cast<float*>(src.data()), src.size()));
}
}  // namespace

// Before any other work: a path that cannot be written is an error naming its key now rather than
// at the first checkpoint or at the end. Rank 0 writes checkpoints and metrics and makes the
// trace's folder; every rank writes its part of the trace, so each checks that it sees that folder
// (a node-local path on a multi-node run does not do).
void Trainer::prepare_outputs() {
  const std::string& dir = cfg_.checkpoint.dir;
  const std::string& trace = cfg_.trace.file;
  collective_phase(comm_, [&] {
    if (rank_ != 0) return;
    if (!dir.empty()) {
      make_dirs(dir, "checkpoint.dir");
      dir_lock_ = std::make_unique<CheckpointDirLock>(dir, "checkpoint.dir");
    }
    prepare_output_file(trace, "trace.file");
    if (!trace.empty()) AtomicFile probe(trace);  // fails now if it cannot be written
    prepare_output_file(opts_.metrics_jsonl, "--metrics-jsonl");
  });
  collective_phase(comm_, [&] {
    if (!trace.empty() && !writable_folder(parent_folder(trace)))
      fail_input("trace.file", "rank ", rank_, " cannot write in ", parent_folder(trace),
                 " (every rank writes its part of the trace: the folder must be shared and writable)");
  });
}

namespace {
std::string broadcast_text(Communicator& world, std::string text) {
  uint64_t n = text.size();
  world.host_broadcast(&n, sizeof(n), 0);
  text.resize(n);
  world.host_broadcast(&text[0], n, 0);
  return text;
}
}  // namespace

std::string Trainer::pick_resume_checkpoint() {
  const auto& ck = cfg_.checkpoint;
  if (ck.resume.is("false")) return "";
  const std::vector<std::string> candidates = resume_candidates(ck.dir);
  if (candidates.empty()) {
    if (ck.resume.is("true"))
      fail_input("checkpoint.resume", "is true but ", ck.dir, " holds no checkpoint (\"auto\" starts fresh then)");
    std::printf("checkpoint.resume = \"auto\": no checkpoint in %s yet, starting fresh\n", ck.dir.c_str());
    return "";
  }
  // The newest that verifies: a checkpoint damaged after it was written (a disk, a copy cut short)
  // costs the steps since the one before it, not the run.
  std::string newest_error;
  for (const std::string& path : candidates) {
    try {
      ModelFile(path, "checkpoint.resume").verify();
      if (!newest_error.empty())
        std::fprintf(stderr, "warning: checkpoint.resume: resuming from %s instead, the newest that verifies\n",
                     path.c_str());
      return path;
    } catch (const InputError& e) {
      std::fprintf(stderr, "warning: checkpoint.resume: %s\n", e.what());
      if (newest_error.empty()) newest_error = e.what();
    }
  }
  fail_input("checkpoint.resume", "no checkpoint in ", ck.dir, " verifies (the newest: ", newest_error, ")");
}

void Trainer::load_initial_state() {
  const auto& ck = cfg_.checkpoint;
  std::string resume_from;
  collective_phase(comm_, [&] {
    if (rank_ != 0 || ck.dir.empty()) return;
    remove_dead_temporaries(ck.dir);
    resume_from = pick_resume_checkpoint();
  });
  resume_from = broadcast_text(*groups_->world, resume_from);
  collective_phase(comm_, [&] {
    if (!resume_from.empty()) {
      read_checkpoint(resume_from, "checkpoint.resume", true);
      saved_step_ = step_;
      if (rank_ == 0) std::printf("resuming from %s at step %lld\n", resume_from.c_str(), (long long)step_);
    } else if (!ck.init_from.empty()) {
      read_checkpoint(ck.init_from, "checkpoint.init_from", false);
      if (rank_ == 0) std::printf("initialised from %s\n", ck.init_from.c_str());
    } else {
      stage_->init_params(uint64_t(cfg_.train.seed));
    }
    if (rank_ == 0) log_ = std::make_unique<MetricsLog>(opts_.metrics_jsonl, step_);
  });
}

// Reads this stage's part (its owned range, plus wte into a tied copy) of a native checkpoint or an
// llm.c model file. Every rank reads the file itself; rank 0 also verifies the checksums (a resume's
// checkpoint has been verified when it was picked).
void Trainer::read_checkpoint(const std::string& path, const std::string& key, bool with_optimizer) {
  const ModelFile file(path, key);
  if (with_optimizer && !file.native())
    fail_input(file.path(), "is an llm.c model file; resume needs a gpt2-kokkos checkpoint");
  if (!(file.config() == cfg_.model))
    fail_input(file.path(), "model differs from the configuration (", file.native() ? "checkpoint" : "file",
               " vs config): ", file.config().diff(cfg_.model));
  if (rank_ == 0 && !with_optimizer) file.verify();
  const StageLayout& L = stage_->layout();
  const Range own = L.owned();
  const size_t tied = L.tied_size(), n = L.local_size();
  auto load = [&](const std::string& section, const Vec<float>& dst) {
    std::vector<float> host(n);
    if (tied) file.read(section, 0, tied, host.data());  // wte, for the tied LM head
    file.read(section, own.begin, own.size(), host.data() + tied);
    copy_to_device(dst, host);
  };
  load("params", Vec<float>(stage_->params.data(), n));
  if (!with_optimizer) return;
  if (file.meta().optimizer != opt_->name())
    fail_input(file.path(), "holds no ", opt_->name(), " state (optimizer \"", file.meta().optimizer, "\")");
  for (auto& [name, buf] : opt_->state()) load("opt." + name, buf);
  step_ = file.meta().step;
  opt_->set_steps_taken(file.meta().updates);
  sample_rng_.set_state(file.meta().rng);
}

// Stage s of dp replica 0 sends its owned range to world rank 0 (stage 0 of replica 0), which
// returns the whole buffer.
std::vector<float> Trainer::gather_section(const Vec<float>& local) {
  const StageLayout& L = stage_->layout();
  const size_t tied = L.tied_size();
  std::vector<float> out;
  if (topo_->dp_rank() != 0) return out;
  Communicator& pipe = *groups_->pipe;
  std::vector<float> mine(L.owned().size());
  Kokkos::deep_copy(HostFloats(mine.data(), mine.size()), Vec<float>(local.data() + tied, mine.size()));
  if (topo_->stage() != 0) {
    pipe.host_send(mine.data(), mine.size() * sizeof(float), 0, kTagParams);
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
    pipe.host_recv(out.data() + offset, count * sizeof(float), s, kTagParams);
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
  const std::string name = checkpoint_name(step_);
  const std::string path = cfg_.checkpoint.dir + "/" + name;
  CheckpointMeta meta;
  meta.model = cfg_.model;
  meta.step = step_;
  meta.rng = sample_rng_.state();
  meta.config_toml = cfg_.toml();
  meta.optimizer = opt_->name();
  meta.updates = opt_->steps_taken();
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
    publish_checkpoint(cfg_.checkpoint.dir, name);
    std::printf("checkpoint: %s\n", path.c_str());
    prune_checkpoints(cfg_.checkpoint.dir, cfg_.checkpoint.keep, step_);
    std::fflush(stdout);
  }
  saved_step_ = step_;
}

}  // namespace gpt2
