#pragma once
// A checkpoint folder: ckpt_NNNNNNNN.bin files written atomically (model/checkpoint.hpp), and
// `latest`, a one-line file naming the newest, itself replaced atomically after the checkpoint is in
// place. Readers go through `latest`; a folder without it holds no checkpoint yet.
#include <string>

namespace gpt2 {

// The path `dir/latest` names, or "" when there is no `latest`.
std::string latest_checkpoint(const std::string& dir);
// Makes `dir/name` the newest (rewrites dir/latest atomically).
void publish_checkpoint(const std::string& dir, const std::string& name);
// "ckpt_00000042.bin" for step 42.
std::string checkpoint_name(long long step);

// AtomicFile's temporaries of checkpoints ("ckpt_NNNNNNNN.bin.tmp.<pid>") and of dir/latest
// ("latest.tmp.<pid>") whose writer is dead are left behind by a crash (SIGKILL, node failure) and
// would accumulate one per crash: removes them, saying so. A writer counts as dead when no process
// has its pid here (or the pid is ours: we have not written yet); a live pid's file is kept, as it
// may belong to another run writing into the same folder.
void remove_dead_temporaries(const std::string& dir);

}  // namespace gpt2
