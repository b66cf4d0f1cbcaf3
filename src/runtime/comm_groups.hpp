#pragma once
// The Communicators of one rank's groups (see Topology), made once: the deck's backend
// (parallel.comm, resolved through the registry) for every group of several ranks, the engine's
// SerialCommunicator for a group of one. `world` serves the control plane (summaries, traces,
// clock synchronisation) and always runs on MPI.
#include <memory>
#include <string>

#include "plugins/communicator.hpp"
#include "runtime/topology.hpp"

namespace gpt2 {

struct CommGroups {
  // choice: parallel.comm (auto | mpi | nccl | mpi-ordered); node: this rank's node (ranks on it).
  CommGroups(const Topology& topo, const std::string& choice, const CommContext& node);

  std::string backend;   // the data-plane backend the choice resolved to
  double bucket_mb = 1;  // its default gradient bucket size (MiB)
  std::unique_ptr<Communicator> world, dp, pipe, cp, tp, tied;  // pipe: the group along pp
  Communicator& along(Axis a) const;  // the group along an axis
  // dp x cp (Topology::replicas_comm): gradient averaging, ZeRO sharding, loss sums. The dp group
  // itself when cp = 1.
  Communicator& replicas() const { return dp_cp_ ? *dp_cp_ : *dp; }

 private:
  std::unique_ptr<Communicator>& slot(Axis a);
  std::unique_ptr<Communicator> dp_cp_;
};

}  // namespace gpt2
