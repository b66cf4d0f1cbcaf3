#pragma once
// This process's memory as the operating system sees it, for the run's memory report and the
// warning before a rank runs out (train.memory_warn).
#include <cstdint>

namespace gpt2 {

// The most resident memory this process has held (Linux: VmHWM); 0 where it cannot be read.
uint64_t peak_rss_bytes();
// The memory this node's processes may use together: the machine's (MemTotal), or the control
// group's limit when that is lower (a Slurm job's --mem); 0 where neither can be read.
uint64_t node_memory_bytes();

}  // namespace gpt2
