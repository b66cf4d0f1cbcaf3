#include "runtime/comm_groups.hpp"

#include "runtime/serial_communicator.hpp"

namespace gpt2 {

CommGroups::CommGroups(const Topology& topo, const std::string& choice, const CommContext& node) {
  const CommBackend& b = resolve_comm_backend(choice, node);
  backend = b.name;
  bucket_mb = b.bucket_mb;
  auto group = [&](MPI_Comm c, const CommBackend& with) -> std::unique_ptr<Communicator> {
    if (size_of(c) == 1) return std::make_unique<SerialCommunicator>();
    return with.make(c);
  };
  world = group(topo.world_comm(), CommRegistry::get("mpi", "parallel.comm"));
  auto make_all = [&] {
    for (Axis a : kAxes) slot(a) = group(topo.along(a), b);
    tied = group(topo.tied_comm(), b);
    if (topo.cp() > 1) dp_cp_ = group(topo.replicas_comm(), b);
  };
  if (b.init_together) b.init_together(make_all);
  else make_all();
}

std::unique_ptr<Communicator>& CommGroups::slot(Axis a) {
  return a == Axis::dp ? dp : a == Axis::pp ? pipe : a == Axis::cp ? cp : tp;
}

Communicator& CommGroups::along(Axis a) const { return *const_cast<CommGroups*>(this)->slot(a); }

}  // namespace gpt2
