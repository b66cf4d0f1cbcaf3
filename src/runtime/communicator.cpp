#include "plugins/communicator.hpp"

#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.hpp"
#include "runtime/watchdog.hpp"

namespace gpt2 {

size_t dtype_size(DType t) { return t == DType::bf16 ? 2 : t == DType::f32 || t == DType::i32 ? 4 : 8; }

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::bf16: return MPI_UINT16_T;  // its sums need bf16_sum_op (mpi_communicator)
    default: return MPI_INT64_T;
  }
}

double Communicator::timeout_seconds() {
  static const double t = [] {
    const char* e = std::getenv("GPT2_COMM_TIMEOUT");
    return e && std::atof(e) > 0 ? std::atof(e) : 600.0;
  }();
  return t;
}

namespace {
std::vector<std::function<std::string()>>& wait_contexts() {
  static thread_local std::vector<std::function<std::string()>> scopes;
  return scopes;
}
}  // namespace

WaitContext::WaitContext(std::function<std::string()> describe) { wait_contexts().push_back(std::move(describe)); }
WaitContext::~WaitContext() { wait_contexts().pop_back(); }

std::string WaitContext::describe() {
  std::string out;
  for (const auto& d : wait_contexts()) {
    const std::string s = d();
    if (!s.empty()) out += (out.empty() ? "" : ", ") + s;
  }
  return out;
}

int world_rank_of(MPI_Comm comm, int rank) {
  MPI_Group g, world;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int out = -1;
  MPI_Group_translate_ranks(g, 1, &rank, world, &out);
  MPI_Group_free(&g);
  MPI_Group_free(&world);
  return out;
}

void abort_on_hang(double waited, const std::string& what) {
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const std::string context = WaitContext::describe();
  const double grace = std::min(30.0, std::max(2.0, 0.05 * Communicator::timeout_seconds()));
  std::fprintf(stderr,
               "error: rank %d waited %.0f s for %s%s%s%s (GPT2_COMM_TIMEOUT = %.0f s): a peer rank died, hangs, or "
               "never makes the matching call. Aborting the job in %.0f s, while the other stuck ranks say what "
               "they wait for: a rank that says nothing died or is stuck computing.\n",
               world, waited, what.c_str(), context.empty() ? "" : " (", context.c_str(), context.empty() ? "" : ")",
               Communicator::timeout_seconds(), grace);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(grace));
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // (MPI_Abort does not return)
}

namespace {
void (*g_background_progress)() = nullptr;
}
void set_background_progress(void (*progress)()) { g_background_progress = progress; }
void background_progress() {
  if (g_background_progress) g_background_progress();
}

void mpi_wait(MPI_Request& r, const char* what, int peer) {
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0;
  for (int spins = 0;; ++spins) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    background_progress();
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(20));
    if ((spins & 1023) == 0) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > Communicator::timeout_seconds())
        abort_on_hang(waited, std::string("the ") + what + (peer >= 0 ? " with peer " + std::to_string(peer) : ""));
    }
  }
}

namespace {
template <class T>
T allreduce_scalar(MPI_Comm comm, T x, MPI_Op op) {
  T y{};
  MPI_Request r;
  MPI_Iallreduce(&x, &y, 1, mpi_datatype(dtype_of<T>()), op, comm, &r);
  mpi_wait(r, "all-reduce of a scalar");
  return y;
}
}  // namespace

double allreduce_sum(MPI_Comm comm, double x) { return allreduce_scalar(comm, x, MPI_SUM); }
int64_t allreduce_max(MPI_Comm comm, int64_t x) { return allreduce_scalar(comm, x, MPI_MAX); }

// ---- control plane ----------------------------------------------------------------------------

namespace {
constexpr size_t kMaxMessage = size_t(1) << 30;  // MPI counts are ints: long messages go in pieces

// Runs op(offset, count) over [0, bytes) in pieces that MPI's int counts can hold (once for 0 bytes).
template <class Op>
void in_pieces(size_t bytes, const Op& op) {
  size_t done = 0;
  do {
    const size_t n = std::min(kMaxMessage, bytes - done);
    op(done, n);
    done += n;
  } while (done < bytes);
}

template <class T>
void divide(void* p, size_t n, int by) {
  T* x = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) x[i] = T(x[i] / by);
}
}  // namespace

void Communicator::host_allreduce(void* buf, size_t count, DType t, ReduceOp op) {
  if (size() == 1 || count == 0) return;
  if (t == DType::bf16) fail("host_allreduce: bf16 is for gradient reductions only");
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, buf, int(count), mpi_datatype(t), op == ReduceOp::max ? MPI_MAX : MPI_SUM,
                 mpi_comm(), &r);
  mpi_wait(r, "control all-reduce");
  if (op != ReduceOp::avg) return;
  switch (t) {
    case DType::f32: divide<float>(buf, count, size()); break;
    case DType::f64: divide<double>(buf, count, size()); break;
    case DType::i32: divide<int32_t>(buf, count, size()); break;
    case DType::i64: divide<int64_t>(buf, count, size()); break;
    case DType::bf16: break;
  }
}

void Communicator::host_all_gather(const void* send, void* recv, size_t bytes) {
  if (bytes > size_t(INT_MAX)) fail("host_all_gather: ", bytes, " bytes per rank is too many");
  MPI_Request r;
  MPI_Iallgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, mpi_comm(), &r);
  mpi_wait(r, "control all-gather");
}

void Communicator::host_broadcast(void* buf, size_t bytes, int root) {
  if (size() == 1) return;
  in_pieces(bytes, [&](size_t at, size_t n) {
    MPI_Request r;
    MPI_Ibcast(static_cast<char*>(buf) + at, int(n), MPI_BYTE, root, mpi_comm(), &r);
    mpi_wait(r, "control broadcast", root);
  });
}

void Communicator::host_send(const void* buf, size_t bytes, int peer, int tag) {
  in_pieces(bytes, [&](size_t at, size_t n) {
    MPI_Request r;
    MPI_Isend(static_cast<const char*>(buf) + at, int(n), MPI_BYTE, peer, tag, mpi_comm(), &r);
    mpi_wait(r, "control send", peer);
  });
}

void Communicator::host_recv(void* buf, size_t bytes, int peer, int tag) {
  in_pieces(bytes, [&](size_t at, size_t n) {
    MPI_Request r;
    MPI_Irecv(static_cast<char*>(buf) + at, int(n), MPI_BYTE, peer, tag, mpi_comm(), &r);
    mpi_wait(r, "control receive", peer);
  });
}

// ---- backends -----------------------------------------------------------------------------------

const CommBackend& resolve_comm_backend(const std::string& choice, const CommContext& ctx) {
  const CommBackend& b = CommRegistry::get(choice, "parallel.comm");
  if (!b.resolve) return b;
  const std::string name = b.resolve(ctx);
  return name == b.name ? b : resolve_comm_backend(name, ctx);
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, MPI_Comm comm) {
  const CommBackend& b = resolve_comm_backend(name, CommContext{});
  if (!b.make) fail("communicator backend ", b.name, " cannot make communicators");
  return b.make(comm);
}

}  // namespace gpt2
