// Trainer: what the run writes (checked before step 1), the initial state (fresh init, our
// checkpoint, llm.c weights) and checkpoints. Files hold the global layout whatever the grid and ZeRO
// level that wrote them: each rank reads its own tensors. An HDF5 checkpoint is written by every rank
// (its own part, parallel/checkpoint_writer), now or from a background thread (checkpoint.async); a
// binary one is assembled on world rank 0 from dp replica 0's ranks.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/fs.hpp"
#include "model/checkpoint_dir.hpp"
#include "runtime/collective.hpp"
#include "model/model_file.hpp"
#include "parallel/checkpoint_writer.hpp"
#include "train/trainer.hpp"

namespace gpt2 {

namespace {
constexpr int kTagParams = 900;
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
      store_->init(uint64_t(cfg_.train.seed));
    }
    if (rank_ == 0) log_ = std::make_unique<MetricsLog>(opts_.metrics_jsonl, step_);
  });
}

// Reads this rank's tensors of a native checkpoint or an llm.c model file. Every rank reads the
// file itself; rank 0 also verifies the checksums (a resume's checkpoint has been verified when it
// was picked).
void Trainer::read_checkpoint(const std::string& path, const std::string& key, bool with_optimizer) {
  const ModelFile file(path, key);
  if (with_optimizer && !file.native())
    fail_input(file.path(), "is an llm.c model file; resume needs a gpt2-kokkos checkpoint");
  if (!(file.config() == cfg_.model))
    fail_input(file.path(), "model differs from the configuration (", file.native() ? "checkpoint" : "file",
               " vs config): ", file.config().diff(cfg_.model));
  if (rank_ == 0 && !with_optimizer) file.verify();
  Optimizer& opt = store_->optimizer();
  if (with_optimizer && file.meta().optimizer != opt.name())
    fail_input(file.path(), "holds no ", opt.name(), " state (optimizer \"", file.meta().optimizer, "\")");
  const StageLayout& L = stage_layout();
  for (const std::string& section : store_->sections()) {
    if (section != "params" && !with_optimizer) continue;
    std::vector<float> local(L.local_size());
    global_to_local(L, [&](size_t b, size_t n, float* dst) { file.read(section, b, n, dst); }, local.data());
    store_->set_local_values(section, local);
  }
  if (!with_optimizer) return;
  step_ = file.meta().step;
  opt.set_steps_taken(file.meta().updates);
  loss_scale_.restore(file.meta().loss_scale, file.meta().loss_scale_clean);
  sample_rng_.set_state(file.meta().rng);
}

// Every rank hands in its local values of the section (collective over dp x cp when sharded); the
// ranks of dp replica 0 (cp rank 0) send theirs to world rank 0, which puts each tensor in its
// global place.
std::vector<float> Trainer::gather_section(const std::string& section) {
  const std::vector<float> mine = store_->local_values(section);
  std::vector<float> out;
  if (topo_->dp_rank() != 0 || topo_->cp_rank() != 0) return out;  // (the cp ranks hold the same)
  Communicator& world = *groups_->world;
  if (rank_ != 0) {
    world.host_send(mine.data(), mine.size() * sizeof(float), 0, kTagParams);
    return out;
  }
  out.assign(layout_->total(), 0.0f);
  local_to_global(stage_layout(), mine.data(), out.data());
  std::vector<float> theirs;
  for (int r = 1; r < topo_->world_size(); ++r) {
    const GridCoords c = Topology::coords_of(topo_->shape(), r);
    if (c.dp != 0 || c.cp != 0) continue;
    const StageLayout L = layout_of(c);
    theirs.resize(L.local_size());
    world.host_recv(theirs.data(), theirs.size() * sizeof(float), r, kTagParams);
    local_to_global(L, theirs.data(), out.data());
  }
  return out;
}

std::vector<float> Trainer::gather_params() { return gather_section("params"); }

void Trainer::save_checkpoint() {
  if (cfg_.checkpoint.dir.empty()) return;
  if (in_flight_) {  // one write at a time: this one waits for the last
    if (rank_ == 0 && !in_flight_->done())
      std::fprintf(stderr,
                   "warning: the checkpoint of step %lld is still being written %lld steps later: checkpoint.every "
                   "is shorter than a write takes here; step %lld's waits for it\n",
                   (long long)in_flight_->step(), (long long)(step_ - in_flight_->step()), (long long)step_);
    complete_checkpoint();
  }
  Tracer::Scope t(tracer_, cfg_.checkpoint.async ? EventKind::checkpoint_stage : EventKind::checkpoint, int(step_));
  const WaitContext context([this] { return "writing the checkpoint of step " + std::to_string(step_); });
  const std::string name = checkpoint_name(step_, cfg_.checkpoint.format);
  const std::string path = cfg_.checkpoint.dir + "/" + name;
  CheckpointMeta meta;
  meta.model = cfg_.model;
  meta.step = step_;
  meta.rng = sample_rng_.state();
  meta.config_toml = cfg_.toml();
  meta.optimizer = store_->optimizer().name();
  meta.updates = store_->optimizer().steps_taken();
  if (loss_scale_.dynamic()) meta.loss_scale = loss_scale_.scale(), meta.loss_scale_clean = loss_scale_.clean_steps();
  const std::vector<std::string> sections = store_->sections();
  saved_step_ = step_;
  if (cfg_.checkpoint.format == "bin") {
    save_bin_checkpoint(path, meta, sections);
    publish(path, step_);
    return;
  }
  // HDF5: created under a temporary name that rank 0 renames once the data and checksums are in.
  int64_t pid = int64_t(::getpid());
  groups_->world->host_broadcast(&pid, sizeof(pid), 0);
  const std::string tmp = path + ".tmp." + std::to_string(pid);  // (remove_dead_temporaries knows it)
  auto writer = std::make_unique<H5CheckpointWriter>(path, tmp, groups_->world->mpi_comm(), meta, stage_layout(),
                                                     groups_->replicas().rank() == 0, sections);
  if (cfg_.checkpoint.async) {
    // The staging: one copy of this rank's state (into the last checkpoint's buffers); the optimizer
    // may change the original from now on.
    staging_.resize(sections.size());
    for (size_t i = 0; i < sections.size(); ++i) store_->owned_values(sections[i], staging_[i]);
    in_flight_ = std::make_unique<BackgroundCheckpoint>(std::move(writer), std::move(staging_), step_,
                                                        [this] { return tracer_.now(); });
    return;
  }
  for (const std::string& s : sections)
    writer->write_section(s, store_->owned_ranges(s),
                          [&](size_t begin, size_t n, float* dst) { store_->copy_owned(s, begin, n, dst); });
  writer->finish();
  publish(path, step_, writer.get());
}

// One binary file, assembled on world rank 0 from dp replica 0's ranks.
void Trainer::save_bin_checkpoint(const std::string& path, const CheckpointMeta& meta,
                                  const std::vector<std::string>& sections) {
  std::unique_ptr<CheckpointWriter> w;
  if (rank_ == 0) w = std::make_unique<CheckpointWriter>(path, meta, layout_->total(), sections);
  for (const std::string& s : sections) {
    std::vector<float> all = gather_section(s);
    if (w) w->append(all.data(), all.size());
  }
  if (w) w->commit();
}

void Trainer::publish(const std::string& path, int64_t step, const H5CheckpointWriter* h5) {
  if (rank_ != 0) return;
  const std::string name = path.substr(path.rfind('/') + 1);
  publish_checkpoint(cfg_.checkpoint.dir, name);
  if (h5) {  // what rank 0 wrote and where its time went (the benchmark reads this line)
    const H5CheckpointWriter::Phases& p = h5->phases();
    std::printf("checkpoint: %s (rank 0: %.3f GB; metadata %.3f s, copy + checksum %.3f s, disk %.3f s, finish %.3f s)\n",
                path.c_str(), h5->bytes_written() / 1e9, p.create, p.fill, p.disk, p.finish);
  } else {
    std::printf("checkpoint: %s\n", path.c_str());
  }
  prune_checkpoints(cfg_.checkpoint.dir, cfg_.checkpoint.keep, step);
  std::fflush(stdout);
}

// checkpoint.async: after each step, the ranks agree whether every background write has ended (one
// int all-reduced while one is in flight); once they all have, it is finished here.
void Trainer::poll_checkpoint() {
  if (!in_flight_) return;
  const WaitContext context([this] { return "agreeing on the background checkpoint write after step " + std::to_string(step_); });
  if (groups_->world->host_max(int32_t(!in_flight_->done())) == 0) complete_checkpoint();
}

void Trainer::complete_checkpoint() {
  if (!in_flight_) return;
  const WaitContext context([this] {
    return "waiting for the background write of the checkpoint of step " + std::to_string(in_flight_->step());
  });
  std::unique_ptr<BackgroundCheckpoint> done = std::move(in_flight_);
  staging_ = done->release_staging();
  tracer_.record(EventKind::checkpoint_write, int(done->step()), -1, done->started(), done->finished(),
                 int64_t(done->writer().bytes_written()));
  done->writer().finish();
  publish(done->writer().path(), done->step(), &done->writer());
}

}  // namespace gpt2
