#pragma once
// A checkpoint folder: ckpt_NNNNNNNN.h5 (or .bin) files written atomically, and
// `latest`, a one-line file naming the newest, itself replaced atomically after the checkpoint is in
// place. Readers go through `latest`; a folder without it holds no checkpoint yet. The run that
// writes into a folder holds its lock (dir/lock) for as long as it runs.
#include <string>
#include <utility>
#include <vector>

#include "core/choice.hpp"

namespace gpt2 {

// The path `dir/latest` names, or "" when there is no `latest`.
std::string latest_checkpoint(const std::string& dir);
// Makes `dir/name` the newest (rewrites dir/latest atomically).
void publish_checkpoint(const std::string& dir, const std::string& name);
// checkpoint.format: h5, one HDF5 file every rank writes its part of (formats/checkpoint_h5); bin,
// our binary format, assembled on rank 0.
enum class CheckpointFormat { h5, bin };
template <>
struct Words<CheckpointFormat> {
  static inline const WordList list{"h5", "bin"};
};

// "ckpt_00000042.h5" for step 42 in format h5 ("ckpt_00000042.bin" in bin).
std::string checkpoint_name(long long step, CheckpointFormat format);

// The checkpoints in dir (files named ckpt_<digits>.bin or .h5) as (step, path), oldest first.
std::vector<std::pair<long long, std::string>> list_checkpoints(const std::string& dir);
// Where a resume may start, best first: the checkpoint `latest` names, then the older ones by step
// (the fall-backs when it does not verify). Without `latest`, every checkpoint there, newest first.
std::vector<std::string> resume_candidates(const std::string& dir);
// checkpoint.keep: once `latest` names the checkpoint of step `newest`, removes all but the `keep`
// newest checkpoints up to that step, saying so (keep 0: none removed). Checkpoints of later steps
// come from another run in the same folder and are left alone.
void prune_checkpoints(const std::string& dir, int keep, long long newest);

// AtomicFile's temporaries of checkpoints ("ckpt_NNNNNNNN.bin.tmp.<pid>") and of dir/latest
// ("latest.tmp.<pid>") whose writer is dead are left behind by a crash (SIGKILL, node failure) and
// would accumulate one per crash: removes them, saying so. A writer counts as dead when no process
// has its pid here (or the pid is ours: we have not written yet); a live pid's file is kept, as it
// may belong to another run writing into the same folder.
void remove_dead_temporaries(const std::string& dir);

// The lock of a checkpoint folder, held by the one run writing there: dir/lock holds "host pid" of
// the holder and carries an advisory lock (flock) that the kernel drops when the holder dies. A
// second run stops at once (InputError naming `key`, the folder and the holder). A lock left behind
// is taken over when its holder is gone: the flock is free and the pid is not alive on this host
// (where the file system has no flock, the pid alone decides, and another host's lock is kept).
// The destructor releases it (removes dir/lock) on every way out: return, exception, stop signal.
class CheckpointDirLock {
 public:
  CheckpointDirLock(const std::string& dir, const std::string& key);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace gpt2
