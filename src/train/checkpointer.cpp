#include "train/checkpointer.hpp"

#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"
#include "formats/model_file.hpp"
#include "runtime/collective.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

Checkpointer::Checkpointer(const RunConfig& cfg, const RankValues& rank, Tracer& tracer, TrainState& state,
                           ModelGather& gather, std::unique_ptr<CheckpointDirLock> dir_lock)
    : cfg_(cfg), rank_(rank), tracer_(tracer), state_(state), gather_(gather), dir_lock_(std::move(dir_lock)) {}

Checkpointer::~Checkpointer() = default;

namespace {
std::string broadcast_text(Communicator& world, std::string text) {
  uint64_t n = text.size();
  world.host_broadcast(&n, sizeof(n), 0);
  text.resize(n);
  world.host_broadcast(&text[0], n, 0);
  return text;
}
}  // namespace

std::string Checkpointer::pick_resume() {
  const auto& ck = cfg_.checkpoint;
  if (ck.resume == Toggle::off) return "";
  const std::vector<std::string> candidates = resume_candidates(ck.dir);
  if (candidates.empty()) {
    if (ck.resume == Toggle::on)
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

void Checkpointer::load_initial_state() {
  const auto& ck = cfg_.checkpoint;
  const MPI_Comm comm = rank_.topo.world_comm();
  std::string resume_from;
  collective_phase(comm, [&] {
    if (!root() || ck.dir.empty()) return;
    remove_dead_temporaries(ck.dir);
    resume_from = pick_resume();
  });
  resume_from = broadcast_text(*rank_.groups.world, resume_from);
  collective_phase(comm, [&] {
    if (!resume_from.empty()) {
      read(resume_from, "checkpoint.resume", true);
      saved_step_ = state_.step;
      if (root()) std::printf("resuming from %s at step %lld\n", resume_from.c_str(), (long long)state_.step);
    } else if (!ck.init_from.empty()) {
      read(ck.init_from, "checkpoint.init_from", false);
      if (root()) std::printf("initialised from %s\n", ck.init_from.c_str());
    } else {
      rank_.store.init(uint64_t(cfg_.train.seed));
    }
  });
  // checkpoint.async: the staging copy's memory is made (and its pages touched) now, so that the
  // first checkpoint's copy runs at memory speed as the later ones do (a fresh 1.5 GB took 6.7 s of
  // page faults on the first checkpoint of a VM; the reused buffers 0.16 s).
  if (!ck.dir.empty() && ck.async && ck.format != CheckpointFormat::bin) {
    const std::vector<std::string> sections = rank_.store.sections();
    staging_.resize(sections.size());
    for (size_t i = 0; i < sections.size(); ++i) rank_.store.owned_values(sections[i], staging_[i]);
  }
}

// Reads this rank's tensors of a native checkpoint or an llm.c model file. Every rank reads the
// file itself; rank 0 also verifies the checksums (a resume's checkpoint has been verified when it
// was picked).
void Checkpointer::read(const std::string& path, const std::string& key, bool with_optimizer) {
  const ModelFile file(path, key);
  if (with_optimizer && !file.native())
    fail_input(file.path(), "is an llm.c model file; resume needs a gpt2-kokkos checkpoint");
  if (!(file.config() == cfg_.model))
    fail_input(file.path(), "model differs from the configuration (", file.native() ? "checkpoint" : "file",
               " vs config): ", file.config().diff(cfg_.model));
  if (root() && !with_optimizer) file.verify();
  ParamStore& store = rank_.store;
  Optimizer& opt = store.optimizer();
  if (with_optimizer && file.meta().optimizer != opt.name())
    fail_input(file.path(), "holds no ", opt.name(), " state (optimizer \"", file.meta().optimizer, "\")");
  const StageLayout& L = rank_.local();
  for (const std::string& section : store.sections()) {
    if (section != "params" && !with_optimizer) continue;
    std::vector<float> local(L.local_size());
    global_to_local(L, [&](size_t b, size_t n, float* dst) { file.read(section, b, n, dst); }, local.data());
    store.set_local_values(section, local);
  }
  if (!with_optimizer) return;
  state_.step = file.meta().step;
  opt.set_steps_taken(file.meta().updates);
  state_.loss_scale.restore(file.meta().loss_scale, file.meta().loss_scale_clean);
  state_.sample_rng.set_state(file.meta().rng);
}

CheckpointMeta Checkpointer::meta() const {
  CheckpointMeta meta;
  meta.model = cfg_.model;
  meta.step = state_.step;
  meta.rng = state_.sample_rng.state();
  meta.config_toml = cfg_.toml();
  meta.optimizer = rank_.store.optimizer().name();
  meta.updates = rank_.store.optimizer().steps_taken();
  if (state_.loss_scale.dynamic())
    meta.loss_scale = state_.loss_scale.scale(), meta.loss_scale_clean = state_.loss_scale.clean_steps();
  return meta;
}

void Checkpointer::save() {
  if (cfg_.checkpoint.dir.empty()) return;
  const int64_t step = state_.step;
  if (in_flight_) {  // one write at a time: this one waits for the last
    if (root() && !in_flight_->done())
      std::fprintf(stderr,
                   "warning: the checkpoint of step %lld is still being written %lld steps later: checkpoint.every "
                   "is shorter than a write takes here; step %lld's waits for it\n",
                   (long long)in_flight_->step(), (long long)(step - in_flight_->step()), (long long)step);
    complete();
  }
  Tracer::Scope t(tracer_, cfg_.checkpoint.async ? EventKind::checkpoint_stage : EventKind::checkpoint, int(step));
  const WaitContext context([step] { return "writing the checkpoint of step " + std::to_string(step); });
  const std::string path = cfg_.checkpoint.dir + "/" + checkpoint_name(step, cfg_.checkpoint.format);
  const std::vector<std::string> sections = rank_.store.sections();
  saved_step_ = step;
  if (cfg_.checkpoint.format == CheckpointFormat::bin) {
    save_bin(path, meta(), sections);
    publish(path, step);
  } else {
    save_h5(path, meta(), sections);
  }
}

// One binary file, assembled on world rank 0 from dp replica 0's ranks.
void Checkpointer::save_bin(const std::string& path, const CheckpointMeta& meta, const std::vector<std::string>& sections) {
  std::unique_ptr<CheckpointWriter> w;
  if (root()) w = std::make_unique<CheckpointWriter>(path, meta, rank_.plan.model->total(), sections);
  for (const std::string& s : sections) {
    std::vector<float> all = gather_.section(s);
    if (w) w->append(all.data(), all.size());
  }
  if (w) w->commit();
}

// HDF5: created under a temporary name that rank 0 renames once the data and checksums are in.
void Checkpointer::save_h5(const std::string& path, const CheckpointMeta& meta, const std::vector<std::string>& sections) {
  ParamStore& store = rank_.store;
  int64_t pid = int64_t(::getpid());
  rank_.groups.world->host_broadcast(&pid, sizeof(pid), 0);
  const std::string tmp = path + ".tmp." + std::to_string(pid);  // (remove_dead_temporaries knows it)
  auto writer = std::make_unique<H5CheckpointWriter>(path, tmp, rank_.groups.world->mpi_comm(), meta,
                                                     rank_.local(), rank_.groups.replicas().rank() == 0,
                                                     sections,
                                                     // async: the staging stays a copy; slices written as they lie
                                                     cfg_.checkpoint.async ? MPI_COMM_SELF : rank_.groups.tp->mpi_comm());
  if (cfg_.checkpoint.async) {
    // The staging: one copy of this rank's state (into the last checkpoint's buffers); the optimizer
    // may change the original from now on.
    staging_.resize(sections.size());
    for (size_t i = 0; i < sections.size(); ++i) store.owned_values(sections[i], staging_[i]);
    in_flight_ = std::make_unique<BackgroundCheckpoint>(std::move(writer), std::move(staging_), meta.step,
                                                        [this] { return tracer_.now(); });
    return;
  }
  for (const std::string& s : sections)
    writer->write_section(s, store.owned_ranges(s),
                          [&](size_t begin, size_t n, float* dst) { store.copy_owned(s, begin, n, dst); });
  writer->finish();
  publish(path, meta.step, writer.get());
}

// Rank 0: `latest`, the message, checkpoint.keep.
void Checkpointer::publish(const std::string& path, int64_t step, const H5CheckpointWriter* h5) {
  if (!root()) return;
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
void Checkpointer::poll() {
  if (!in_flight_) return;
  const int64_t step = state_.step;
  const WaitContext context([step] { return "agreeing on the background checkpoint write after step " + std::to_string(step); });
  if (rank_.groups.world->host_max(int32_t(!in_flight_->done())) == 0) complete();
}

void Checkpointer::complete() {
  if (!in_flight_) return;
  const int64_t step = in_flight_->step();
  const WaitContext context([step] {
    return "waiting for the background write of the checkpoint of step " + std::to_string(step);
  });
  std::unique_ptr<BackgroundCheckpoint> done = std::move(in_flight_);
  staging_ = done->release_staging();
  tracer_.record(EventKind::checkpoint_write, int(done->step()), -1, done->started(), done->finished(),
                 int64_t(done->writer().bytes_written()));
  done->writer().finish();
  publish(done->writer().path(), done->step(), &done->writer());
}

}  // namespace gpt2
