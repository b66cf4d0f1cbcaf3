// The Communicator's operations on the MPI backend (and NCCL where built with it), on the world:
// all-reduce sum/avg/max, reduce-scatter, all-gather, send/recv in a ring, barrier, non-blocking
// forms completed out of order.
#include <gtest/gtest.h>

#include <numeric>

#include "modules/comm/auto.hpp"
#include "runtime/comm_groups.hpp"
#include "plugins/communicator.hpp"
#include "tensor/views.hpp"
#include "runtime/watchdog.hpp"

using namespace gpt2;

namespace {
int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
template <class T>
Buffer<T> fill(size_t n, T (*f)(size_t)) {
  Buffer<T> b("b", n);
  auto h = Kokkos::create_mirror_view(b);
  for (size_t i = 0; i < n; ++i) h(i) = f(i);
  Kokkos::deep_copy(b, h);
  return b;
}
template <class T>
std::vector<T> host(const Buffer<T>& b) {
  auto h = Kokkos::create_mirror_view(b);
  Kokkos::deep_copy(h, b);
  return std::vector<T>(h.data(), h.data() + h.extent(0));
}
// mpi-ordered too: what runs there runs on NCCL's ordering (an ungrouped exchange hangs).
std::vector<std::string> backends() {
#if defined(GPT2_HAVE_NCCL)
  return {"mpi", "mpi-ordered", "nccl"};
#else
  return {"mpi", "mpi-ordered"};
#endif
}
}  // namespace

TEST(Communicator, CollectivesAndPointToPoint) {
  const int r = world_rank(), p = world_size();
  for (const std::string& name : backends()) {
    auto comm = make_communicator(name, MPI_COMM_WORLD);
    ASSERT_EQ(comm->rank(), r);
    ASSERT_EQ(comm->size(), p);
    const size_t n = 1000;
    // sum and avg of value = rank + i / 1000
    Buffer<float> a("a", n), b("b", n);
    Kokkos::deep_copy(a, float(r + 1)), Kokkos::deep_copy(b, float(2 * r));
    Request ra = comm->iallreduce(a.data(), n, DType::f32, ReduceOp::sum);
    Request rb = comm->iallreduce(b.data(), n, DType::f32, ReduceOp::avg);
    comm->wait(rb);  // out of order
    comm->wait(ra);
    const float sum = float(p * (p + 1) / 2), avg = float(p - 1);
    for (float x : host(a)) ASSERT_EQ(x, sum) << name;
    for (float x : host(b)) ASSERT_FLOAT_EQ(x, avg) << name;
    Buffer<double> m("m", 3);
    Kokkos::deep_copy(m, double(r));
    comm->allreduce(m.data(), 3, DType::f64, ReduceOp::max);
    EXPECT_EQ(host(m)[2], double(p - 1));
    // reduce-scatter: rank q gets the sum over ranks of block q
    const size_t blk = 4;
    Buffer<float> send("send", blk * p), recv("recv", blk);
    Kokkos::deep_copy(send, 1.0f);
    Request rs = comm->ireduce_scatter(send.data(), recv.data(), blk, DType::f32, ReduceOp::sum);
    comm->wait(rs);
    for (float x : host(recv)) EXPECT_EQ(x, float(p)) << name;
    // all-gather: everyone's rank, in rank order
    Buffer<int32_t> mine("mine", 2), all("all", 2 * p);
    Kokkos::deep_copy(mine, int32_t(r));
    Request rg = comm->iall_gather(mine.data(), all.data(), 2, DType::i32);
    comm->wait(rg);
    const auto g = host(all);
    for (int q = 0; q < p; ++q) EXPECT_EQ(g[2 * q + 1], q) << name;
    // ring as one grouped exchange: send to the right, receive from the left. On one rank that is
    // a rank exchanging with itself, which NCCL allows only inside a group.
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    Buffer<float> out("out", n), in("in", n), back("back", n / 2);
    Kokkos::deep_copy(out, float(r));
    Request rx = comm->isendrecv(out.data(), n, right, 5, in.data(), n, left, 5, DType::f32);
    comm->wait(rx);
    for (float x : host(in)) ASSERT_EQ(x, float(left)) << name;
    // and back the other way, with a different count, so send and receive sizes are not confused
    rx = comm->isendrecv(in.data(), n / 2, left, 6, back.data(), n / 2, right, 6, DType::f32);
    comm->wait(rx);
    for (float x : host(back)) ASSERT_EQ(x, float(r)) << name;
    // ring: separate send and receive, issued as one group (NCCL runs a rank's operations in issue
    // order: ungrouped, every rank's receive would wait for a send queued behind another rank's
    // receive). NCCL pairs a send to itself only with a receive in the same group.
    Kokkos::deep_copy(in, -1.0f);
    comm->group_start();
    Request rr = comm->irecv(in.data(), n, DType::f32, (r + p - 1) % p, 7);
    Request rsend = comm->isend(out.data(), n, DType::f32, (r + 1) % p, 7);
    comm->group_end();
    comm->wait(rsend);
    comm->wait(rr);
    for (float x : host(in)) ASSERT_EQ(x, float((r + p - 1) % p)) << name;
    comm->barrier();
  }
}

// A gradient-sized all-reduce (a 25 MiB bucket and an odd tail), the way the data-parallel
// averager issues it, gives the same bits on NCCL as on MPI. Values are multiples of 1/8 below 2^12,
// so every sum is exact in float whatever the order. Also runs on one rank: an NCCL communicator of
// size 1 (gpt2 train with dp = 1 makes none, so this is where NCCL at world size 1 is checked).
TEST(Communicator, NcclAllReduceMatchesMpi) {
#if !defined(GPT2_HAVE_NCCL)
  GTEST_SKIP() << "built without NCCL";
#else
  const int r = world_rank(), p = world_size();
  auto nccl = make_communicator("nccl", MPI_COMM_WORLD);
  auto mpi = make_communicator("mpi", MPI_COMM_WORLD);
  ASSERT_EQ(nccl->backend(), "nccl");
  ASSERT_EQ(nccl->size(), p);
  const size_t bucket = size_t(25) * 1024 * 1024 / sizeof(float), tail = 12345;
  auto value = [r](size_t i) { return float((i * 7 + size_t(r) * 13) % 4001) * 0.125f; };
  Buffer<float> a("a", bucket + tail), b("b", bucket + tail);
  {
    auto h = Kokkos::create_mirror_view(a);
    for (size_t i = 0; i < h.extent(0); ++i) h(i) = value(i);
    Kokkos::deep_copy(a, h);
    Kokkos::deep_copy(b, h);
  }
  for (auto* c : {nccl.get(), mpi.get()}) {
    Buffer<float>& x = c == nccl.get() ? a : b;
    Request r1 = c->iallreduce(x.data(), bucket, DType::f32, ReduceOp::avg);
    Request r2 = c->iallreduce(x.data() + bucket, tail, DType::f32, ReduceOp::sum);
    c->wait(r1);
    c->wait(r2);
  }
  const auto ha = host(a), hb = host(b);
  size_t differ = 0;
  for (size_t i = 0; i < ha.size(); ++i) differ += ha[i] != hb[i];
  EXPECT_EQ(differ, 0u) << "of " << ha.size() << " values";
  // One rank: the all-reduce is the identity.
  if (p == 1) {
    EXPECT_EQ(ha[bucket + 17], value(bucket + 17));
    EXPECT_EQ(ha[3], value(3));
  }
  nccl->barrier();
#endif
}

TEST(Communicator, ScalarHelpersAgreeOnEveryRank) {
  const int r = world_rank(), p = world_size();
  EXPECT_DOUBLE_EQ(allreduce_sum(MPI_COMM_WORLD, 0.5 * r), 0.25 * p * (p - 1));
  EXPECT_EQ(allreduce_max(MPI_COMM_WORLD, int64_t(r) * 3), int64_t(p - 1) * 3);
}

// The grid's groups: every group of one rank is a serial communicator (collectives are the identity,
// a send-receive with itself a copy), the others the chosen backend over the right members.
TEST(CommGroups, GroupsFollowTheGridAndSingleRankGroupsAreSerial) {
  const int r = world_rank(), p = world_size();
  if (p % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const GridShape shape{p / 2, 2, 1, 1};
  Topology topo(MPI_COMM_WORLD, shape);
  CommGroups g(topo, "mpi", CommContext{});
  EXPECT_EQ(g.backend, "mpi");
  EXPECT_EQ(g.world->size(), p);
  EXPECT_EQ(g.dp->size(), p / 2);
  EXPECT_EQ(g.dp->rank(), topo.dp_rank());
  EXPECT_EQ(g.pipe->size(), 2);
  EXPECT_EQ(g.pipe->rank(), topo.stage());
  EXPECT_EQ(g.tp->backend(), "serial");
  EXPECT_EQ(g.tied->size(), 2);  // two stages: both are the ends that share wte
  EXPECT_EQ(topo.stage(), r % 2);
  // The pipeline group's members are the two stages of this replica.
  const int partner = g.pipe->host_sum(r) - r;
  EXPECT_EQ(partner, r % 2 == 0 ? r + 1 : r - 1);
  // Serial semantics on the tp group.
  Buffer<float> a("a", 4), b("b", 4);
  Kokkos::deep_copy(a, 3.0f);
  g.tp->allreduce(a.data(), 4, DType::f32, ReduceOp::sum);
  Request q = g.tp->isendrecv(a.data(), 4, 0, 1, b.data(), 4, 0, 1, DType::f32);
  g.tp->wait(q);
  EXPECT_EQ(host(b), std::vector<float>(4, 3.0f));
  EXPECT_EQ(g.tp->host_gather_all(7), std::vector<int>{7});
  // Control plane on the world: every rank's value, in rank order.
  const std::vector<int> all = g.world->host_gather_all(10 * r);
  for (int i = 0; i < p; ++i) EXPECT_EQ(all[size_t(i)], 10 * i);
}

// Consecutive world ranks in pairs (a last odd rank alone), for the two-rank tests.
static MPI_Comm world_pairs() {
  MPI_Comm pair;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() / 2, 0, &pair);
  return pair;
}

// mpi-ordered behaves as NCCL does: a send completes only once its receive is posted (plain MPI
// completes a small one at once), and a neighbour exchange issued as one group completes on both
// sides (issued as a receive then a send by both, it would hang: each receive queued ahead of the
// send the other waits for).
TEST(Communicator, OrderedSendsCompleteWhenReceivedAndGroupsExchange) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm pair = world_pairs();
  const int me = rank_in(pair), n = size_of(pair);
  if (n == 2) {
    auto c = make_communicator("mpi-ordered", pair);
    ASSERT_EQ(c->backend(), "mpi-ordered");
    Buffer<float> out = fill<float>(16, [](size_t i) { return float(i); }), in("in", 16);
    const int other = 1 - me;
    if (me == 0) {
      Request s = c->isend(out.data(), 16, DType::f32, other, 7);
      for (int i = 0; i < 100; ++i) c->progress();
      EXPECT_FALSE(c->test(s)) << "a send completed before its receive was posted";
      MPI_Barrier(pair);
      c->wait(s);
    } else {
      MPI_Barrier(pair);
      c->recv(in.data(), 16, DType::f32, other, 7);
      EXPECT_EQ(host(in)[5], 5.0f);
    }
    // Both ranks: receive then send, as one group.
    c->group_start();
    Request r = c->irecv(in.data(), 16, DType::f32, other, 9);
    Request s = c->isend(out.data(), 16, DType::f32, other, 9);
    c->group_end();
    c->wait(r);
    c->wait(s);
    EXPECT_EQ(host(in)[15], 15.0f);
  }
  MPI_Comm_free(&pair);
}

// Ordered communicators share the device's one queue: an operation of one waits for every earlier
// operation of another. Rank 0 (ordered) queues a send on `a`, unmatched for now, then a receive on
// `b`; rank 1 (plain MPI, so that it can look on) sends on `b` at once, and rank 0's receive stays
// incomplete until rank 1 has received on `a` -- then both complete.
TEST(Communicator, OrderedCommunicatorsShareOneQueue) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm pair = world_pairs();
  const int me = rank_in(pair), n = size_of(pair);
  if (n == 2) {
    const std::string backend = me == 0 ? "mpi-ordered" : "mpi";
    auto a = make_communicator(backend, pair), b = make_communicator(backend, pair);
    Buffer<float> x = fill<float>(16, [](size_t i) { return float(i); }), y("y", 16);
    const int other = 1 - me;
    if (me == 0) {
      Request s = a->isend(x.data(), 16, DType::f32, other, 1);
      Request r = b->irecv(y.data(), 16, DType::f32, other, 2);
      MPI_Barrier(pair);  // rank 1 has sent on b
      for (int i = 0; i < 200; ++i) b->progress();
      EXPECT_FALSE(b->test(r)) << "the receive on b completed before the earlier send on a";
      MPI_Barrier(pair);
      a->wait(s);
      b->wait(r);
      EXPECT_EQ(host(y)[3], 3.0f);
    } else {
      Request s = b->isend(x.data(), 16, DType::f32, other, 2);
      MPI_Barrier(pair);
      MPI_Barrier(pair);
      a->recv(y.data(), 16, DType::f32, other, 1);
      b->wait(s);
    }
  }
  MPI_Comm_free(&pair);
}

// Two ranks that exchange: a receive and a send, on one communicator or split over two, complete
// when issued as one group (the hang when they are not is the Hangs* tests below).
TEST(Communicator, OrderedExchangeCompletesWhenGrouped) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm pair = world_pairs();
  const int me = rank_in(pair), n = size_of(pair);
  if (n == 2) {
    auto a = make_communicator("mpi-ordered", pair), b = make_communicator("mpi-ordered", pair);
    Buffer<float> x("x", 16), y("y", 16), z("z", 16);
    Kokkos::deep_copy(x, float(100 * me));
    const int other = 1 - me;
    a->group_start();
    Request r = a->irecv(y.data(), 16, DType::f32, other, 1);
    Request s = a->isend(x.data(), 16, DType::f32, other, 1);
    a->group_end();
    a->order_after(r);
    a->order_after(s);
    EXPECT_EQ(host(y)[2], float(100 * other));
    // Each direction on a communicator of its own: rank 0 receives on a and sends on b, rank 1 the
    // other way round. (The group spans communicators, as NCCL's does.)
    Communicator& in = me == 0 ? *a : *b;
    Communicator& out = me == 0 ? *b : *a;
    a->group_start();
    r = in.irecv(z.data(), 16, DType::f32, other, 2);
    s = out.isend(x.data(), 16, DType::f32, other, 2);
    a->group_end();
    in.order_after(r);
    out.order_after(s);
    EXPECT_EQ(host(z)[5], float(100 * other));
  }
  MPI_Comm_free(&pair);
}

// The host runs ahead of mpi-ordered's device as a GPU's host does: order_after returns at once, even
// on a send whose receive is not posted yet (rank 1 posts it only after a barrier rank 0 reaches
// after order_after: a blocking order_after would deadlock here); the device catches up when the next
// device work is issued. And test() sees an operation done only once the device has done
// GPT2_DEVICE_LAG (1024) more operations: a few polls after completion it still looks unfinished.
TEST(Communicator, OrderedHostRunsAheadOfItsDevice) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm pair = world_pairs();
  const int me = rank_in(pair), n = size_of(pair);
  if (n == 2) {
    auto c = make_communicator("mpi-ordered", pair);
    Buffer<float> out = fill<float>(16, [](size_t i) { return float(i); }), in("in", 16);
    const int other = 1 - me;
    if (me == 0) {
      Request s = c->isend(out.data(), 16, DType::f32, other, 3);
      c->order_after(s);  // returns: the stream waits, not the host
      EXPECT_FALSE(s.pending());
      MPI_Barrier(pair);
      Kokkos::deep_copy(ExecSpace(), out, 1.0f);  // device work: the stream catches up on the send first
      Request t = c->isend(out.data(), 16, DType::f32, other, 4);
      MPI_Barrier(pair);  // rank 1 has received it
      for (int i = 0; i < 10; ++i) c->progress();
      EXPECT_FALSE(c->test(t)) << "a completed send looked finished a few polls later";
      int polls = 0;
      while (!c->test(t) && polls < 100000) c->progress(), ++polls;
      EXPECT_GT(polls, 500) << "seen complete before the device's lag";
      EXPECT_LT(polls, 100000) << "never seen complete";
    } else {
      MPI_Barrier(pair);
      c->recv(in.data(), 16, DType::f32, other, 3);
      EXPECT_EQ(host(in)[7], 7.0f);
      c->recv(in.data(), 16, DType::f32, other, 4);
      EXPECT_EQ(host(in)[7], 1.0f);
      MPI_Barrier(pair);
    }
  }
  MPI_Comm_free(&pair);
}

// NCCL launches a group at its end: nothing issued in it can be waited for, or ordered after, before
// group_end. mpi-ordered refuses both, as NCCL does.
TEST(Communicator, OrderedRefusesWaitsInsideAGroup) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm pair = world_pairs();
  const int me = rank_in(pair), n = size_of(pair);
  if (n == 2) {
    auto c = make_communicator("mpi-ordered", pair);
    Buffer<float> x("x", 16), y("y", 16);
    const int other = 1 - me;
    c->group_start();
    Request r = c->irecv(y.data(), 16, DType::f32, other, 5);
    Request s = c->isend(x.data(), 16, DType::f32, other, 5);
    EXPECT_FALSE(c->test(r));
    EXPECT_THROW(c->order_after(r), std::exception);
    EXPECT_THROW(c->wait(s), std::exception);
    c->group_end();
    c->wait(r);
    c->wait(s);
  }
  MPI_Comm_free(&pair);
}

// What a GPU does with an exchange that is not grouped: each rank's receive heads its queue and the
// send the other waits for is queued behind it -- a hang, met when the next device work (the copy
// that reads y) waits for the receive. Run (disabled here) by tests/e2e/test_ordered_hang.py, which
// expects the watchdog's exit 3 naming both ranks' waits.
TEST(Communicator, DISABLED_HangsUngroupedReceiveThenSend) {
  MPI_Comm pair = world_pairs();
  if (size_of(pair) == 2) {
    auto c = make_communicator("mpi-ordered", pair);
    Buffer<float> x("x", 16), y("y", 16);
    const int other = 1 - rank_in(pair);
    Request r = c->irecv(y.data(), 16, DType::f32, other, 1);
    Request s = c->isend(x.data(), 16, DType::f32, other, 1);
    c->order_after(r);
    c->order_after(s);
    host(y);
  }
  MPI_Comm_free(&pair);
}
TEST(Communicator, DISABLED_HangsPairSplitOverTwoCommunicators) {
  MPI_Comm pair = world_pairs();
  if (size_of(pair) == 2) {
    auto a = make_communicator("mpi-ordered", pair), b = make_communicator("mpi-ordered", pair);
    Buffer<float> x("x", 16), y("y", 16);
    const int me = rank_in(pair), other = 1 - me;
    Communicator& in = me == 0 ? *a : *b;  // each direction on a communicator of its own
    Communicator& out = me == 0 ? *b : *a;
    Request r = in.irecv(y.data(), 16, DType::f32, other, 1);
    Request s = out.isend(x.data(), 16, DType::f32, other, 1);
    in.order_after(r);
    out.order_after(s);
    host(y);
  }
  MPI_Comm_free(&pair);
}

// parallel.comm = "auto": NCCL only where the build has it and every rank on the node has its own GPU;
// the fallback to host-staged MPI in a CUDA build says why instead of slowing the run without a word.
TEST(CommAuto, FallsBackToMpiOnlyWithAReason) {
  std::string why;
  EXPECT_EQ(auto_backend(false, 4, 0, &why), "mpi");
  EXPECT_TRUE(why.empty()) << "a host build's mpi is no fallback";
  EXPECT_EQ(auto_backend(true, 4, 4, &why), "nccl");
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(auto_backend(true, 4, 2, &why), "mpi");
  EXPECT_NE(why.find("4 ranks"), std::string::npos) << why;
  EXPECT_NE(why.find("2 GPU"), std::string::npos) << why;
  // Through the registry, as a deck's "auto" is resolved (a host build: mpi).
#if !defined(GPT2_HAVE_NCCL)
  CommContext node;
  node.local_size = 2, node.gpus = 0;
  EXPECT_EQ(resolve_comm_backend("auto", node).name, "mpi");
#endif
}
