// ParamStore's state as a whole (parallel/param_store.hpp): initialisation, the sections a
// checkpoint reads and writes (gathered, or what this rank owns), and the memory it holds.
#include "core/error.hpp"
#include "parallel/param_store.hpp"
#include "runtime/device_sync.hpp"

namespace gpt2 {

namespace {
using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
Vec<float> vec(float* p, size_t n) { return Vec<float>(p, n); }
}  // namespace

// ---- state ------------------------------------------------------------------------------------

void ParamStore::init(uint64_t seed) {
  copies_.all_stale();
  params_->init(seed);
}

Buffer<float> ParamStore::gather_whole(const float* shard) {
  Buffer<float> whole = uninitialized<float>("gathered", layout_.local_size());
  std::vector<Request> pending;
  for (const Bucket& b : shards_.buckets())
    pending.push_back(parts_.dp.iall_gather(shard + b.shard_offset, whole.data() + b.range.begin, b.piece.size(), DType::f32));
  for (Request& r : pending) parts_.dp.wait(r);
  return whole;
}

std::vector<std::string> ParamStore::sections() const {
  std::vector<std::string> out = {"params"};
  for (auto& s : opt_->state()) out.push_back("opt." + s.first);
  return out;
}

Vec<float> ParamStore::state_buffer(const std::string& section) {
  for (auto& s : opt_->state())
    if ("opt." + s.first == section) return s.second;
  fail("ParamStore: no state section ", section);
}

std::vector<float> ParamStore::local_values(const std::string& section) {
  const size_t n = layout_.local_size();
  const bool params = section == "params", sharded = params ? params_sharded() : policy_.optimizer;
  const float* own = params ? params_->whole().data() : state_buffer(section).data();  // (unsharded)
  const Buffer<float> whole = sharded ? gather_whole(params ? shard_.params.data() : state_buffer(section).data()) : Buffer<float>();
  std::vector<float> out(n);
  Kokkos::deep_copy(ExecSpace(), HostFloats(out.data(), n), CVec<float>(sharded ? whole.data() : own, n));
  device_sync("a checkpoint's values to the host");  // (between steps: checkpoints, tests)
  return out;
}

size_t ParamStore::Owned::size() const { return ranges.empty() ? 0 : at.back() + ranges.back().size(); }

ParamStore::Owned ParamStore::owned_ranges(const std::string& section) const {
  Owned out;
  out.sharded = section == "params" ? params_sharded() : policy_.optimizer;
  if (!out.sharded) {
    out.ranges.push_back({0, layout_.local_size()});
    out.at.push_back(0);
    return out;
  }
  const std::vector<TensorShard>& plan = shards_.optimizer_shards();
  for (size_t i = 0; i < plan.size(); ++i) {  // each tensor's held rows, one run of the shard
    const TensorInfo& part = shards_.shard_tensors()[i];
    const TensorInfo& t = layout_.tensor(part.kind, part.layer);
    const size_t row = row_length(t);
    size_t value = plan[i].run.begin;
    for (const Range& r : plan[i].rows) {
      out.ranges.push_back({t.range.begin + r.begin * row, t.range.begin + r.end * row});
      out.at.push_back(value);
      value += r.size() * row;
    }
    if (value != plan[i].run.end) fail("ParamStore: the plan's rows of ", t.name(), " are not its run of the shard");
  }
  return out;
}

void ParamStore::copy_owned(const std::string& section, size_t begin, size_t n, float* dst) {
  const bool sharded = section == "params" ? params_sharded() : policy_.optimizer;
  const float* src = section != "params" ? state_buffer(section).data() : sharded ? shard_.params.data() : params_->whole().data();
  const size_t size = sharded ? shards_.shard_size() : layout_.local_size();
  if (begin + n > size) fail("ParamStore: values [", begin, ", ", begin + n, ") of ", section, " past its ", size);
  Kokkos::deep_copy(ExecSpace(), HostFloats(dst, n), CVec<float>(src + begin, n));
  device_sync("a checkpoint's values to the host");  // (between steps)
}

void ParamStore::owned_values(const std::string& section, Owned& into) {
  std::vector<float> keep = std::move(into.values);
  into = owned_ranges(section);
  into.values = std::move(keep);
  into.values.resize(into.size());
  copy_owned(section, 0, into.values.size(), into.values.data());
}

void ParamStore::set_local_values(const std::string& section, const std::vector<float>& values) {
  const size_t n = layout_.local_size();
  if (values.size() != n) fail("ParamStore: ", section, " has ", values.size(), " values for a layout of ", n);
  const HostFloats host(const_cast<float*>(values.data()), n);
  struct Done {  // `values` may go once this returns: the copies from it must be complete
    ~Done() { device_sync("a checkpoint's values from the host"); }
  } done;
  if (section == "params") {
    copies_.all_stale();
    params_->set(values);
    return;
  }
  float* shard = state_buffer(section).data();
  if (!policy_.optimizer) {
    Kokkos::deep_copy(ExecSpace(), vec(shard, n), host);
    return;
  }
  Buffer<float> whole = uninitialized<float>("whole", n);
  Kokkos::deep_copy(ExecSpace(), whole, host);
  parts_.scatter_pieces(whole.data(), shard);
}

size_t ParamStore::gather_bytes() const {
  if (!policy_.optimizer || shards_.ranks() == 1) return 0;
  size_t n = 0;
  for (size_t id = 0; id < shards_.buckets().size(); ++id) n += bucket_gather_bytes(parts_, int(id));
  return n;
}

MemoryUse ParamStore::memory() const {
  const size_t f = sizeof(float), s = policy_.optimizer ? shards_.shard_size() : 0;
  MemoryUse m;
  m.params = (params_->whole().extent(0) + s) * f + copies_.bytes();
  m.grads = (grads_->whole_size() + s) * f;
  for (auto& st : const_cast<Optimizer&>(*opt_).state()) m.optimizer += st.second.extent(0) * f;
  return m;
}

}  // namespace gpt2
