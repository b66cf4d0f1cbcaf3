// ParamStore on one rank (a serial communicator), as the trainer runs it. The squared gradient norm
// taken unit by unit while backward runs equals the sum over the final gradients, also when
// microbatches accumulate (a unit's part must wait for its last microbatch).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "model/stage.hpp"
#include "parallel/param_store.hpp"
#include "runtime/serial_communicator.hpp"
#include "tensor/gemm.hpp"
#include "parallel/zero.hpp"
#include "test_util.hpp"
#include "../common/store_training.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
ModelConfig tiny(int layers) {
  ModelConfig cfg;
  cfg.n_layer = layers, cfg.n_head = 2, cfg.n_embd = 16, cfg.vocab_size = 50, cfg.block_size = 8;
  return cfg;
}

// One rank's whole model of `layers` blocks: its one-stage layout, a serial dp group, a tracer.
struct OneRank {
  explicit OneRank(int layers) : cfg(tiny(layers)), layout(cfg), sl(layout, 0, cfg.n_layer) {}
  const ModelConfig cfg;
  const ParamLayout layout;  // (the stage's layout reads it)
  const StageLayout sl;
  SerialCommunicator dp;
  Tracer tracer;
};

void expect_norm_of_final_gradients(int microbatches) {
  OneRank one(3);
  const ModelConfig& cfg = one.cfg;
  const StageLayout& sl = one.sl;
  ParamStore store(sl, one.dp, zero_policy(0), 1000, "adamw", OptimizerConfig{}, one.tracer);
  store.init(3);
  StageOptions<float> so;
  so.store = &store;
  const int B = 2, T = 8, N = B * T;
  Stage<float> stage(sl, B, T, so);
  Buffer<float> losses("losses", N);
  Kokkos::View<double, MemSpace> sumsq("sumsq");
  auto a = stage.make_activations(B);
  Rng r(9);
  auto ht = Kokkos::create_mirror_view(a.tokens);
  for (int mb = 0; mb < microbatches; ++mb) {
    if (mb == 0) store.begin_step(0, microbatches);
    for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(cfg.vocab_size));
    a.load(ht.data(), ht.data());
    stage.forward(a, Vec<float>(losses.data(), N), true, 1.0f / N);
    stage.backward(a);
  }
  store.finish_gradients();
  store.grad_sum_of_squares(DeviceScalar(sumsq.data()));
  const auto g = to_host<float>(Vec<const float>(store.grads(0), sl.local_size()));
  long double want = 0;
  for (float x : g) want += (long double)x * x;
  const double got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sumsq)();
  ASSERT_GT(want, 0);
  EXPECT_NEAR(got, double(want), 1e-12 * double(want)) << microbatches << " microbatches";
}
}  // namespace

TEST(ParamStore, NormTakenAsUnitsCompleteEqualsTheFinalGradients) {
  expect_norm_of_final_gradients(1);
  expect_norm_of_final_gradients(3);
}

// A region a product wrote last (UnitStore::wrote) is summed at once where it is final: ZeRO-0 on one
// rank, the step's last microbatch. Only the chunks wholly inside it (the values around it may still
// change), and again when a later writer asks first_write over it: the norm is always the final one.
// (A writer that breaks the rule after wrote() shows when the sum was taken.)
namespace {
void fill_region(float* at, size_t n, float v) { Kokkos::deep_copy(ExecSpace(), Vec<float>(at, n), v); }
double norm_squared(ParamStore& store) {
  Kokkos::View<double, MemSpace> sumsq("sumsq");
  store.grad_sum_of_squares(DeviceScalar(sumsq.data()));
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sumsq)();
}
}  // namespace

TEST(ParamStore, NormTakesARegionWhenItsWriterIsDone) {
  ModelConfig cfg = tiny(2);
  cfg.n_embd = 64;  // fc's weight: 4 chunks of 4096
  const ParamLayout layout(cfg);
  const StageLayout sl(layout, 0, cfg.n_layer);
  SerialCommunicator dp;
  Tracer tracer;
  const int u = sl.unit_index(UnitKind::block, 1);
  const TensorInfo& fc = sl.tensor(Param::fcw, 1);
  const size_t at = fc.range.begin - sl.units()[size_t(u)].range.begin, n = fc.range.size();
  for (int zero : {0, 1})
    for (int microbatches : {1, 2})
      for (int again : {0, 1}) {
        const std::string what = "ZeRO-" + std::to_string(zero) + ", " + std::to_string(microbatches) +
                                 " microbatches" + (again ? ", written again" : "");
        ParamStore store(sl, dp, zero_policy(zero), 1000, "adamw", OptimizerConfig{}, tracer);
        store.init(5);
        store.begin_step(0, microbatches);
        const size_t m = n - 150;  // the product's region [100, n - 50): not at a chunk's start or end
        for (int mb = 0; mb < microbatches; ++mb) {
          float* g = store.grads(u) + at;
          store.first_write(u, g + 100, m, true);
          fill_region(g + 100, m, 1.0f + float(mb));
          store.wrote(u, g + 100, m);
          fill_region(g, 100, 3.0f);  // writers beside it that do not ask: the chunks it shares change
          fill_region(g + n - 50, 50, 5.0f);
          if (again) {
            store.first_write(u, g + n / 2, 10, false);
            fill_region(g + n / 2, 10, 7.0f);
          } else if (mb + 1 == microbatches) {
            fill_region(g + 9000, 10, 100.0f);  // breaks the rule: unseen where wrote() summed its chunk
          }
          store.grads_done(u, false);
        }
        store.finish_gradients();
        const double last = float(microbatches) * float(microbatches);
        const double changed = again ? 49.0 : zero == 0 ? last : 1e4;
        const double want = 100 * 9.0 + 50 * 25.0 + 10 * changed + (m - 10) * last;
        EXPECT_EQ(norm_squared(store), want) << what;
      }
}

// Mixed precision: the store's 16-bit working copy (written by AdamW's pass under ZeRO-0, by the
// parameter all-gather of 16-bit matrices under ZeRO-1/2 and of a unit under ZeRO-3, and after a
// load) holds the masters rounded, so a stage reading it trains exactly as one that rounds every
// weight at every GEMM. (One rank here; tests/mpi/test_zero.cpp gathers over 2 and 4.)
namespace {
std::vector<uint16_t> rounded(const std::vector<float>& x, Precision p) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = p == Precision::bf16 ? half_bits::bf16_from_float(x[i]) : half_bits::fp16_from_float(x[i]);
  return out;
}

void expect_copy_trains_as_rounding_per_gemm(Precision precision, int zero) {
  OneRank one(2);
  const ModelConfig& cfg = one.cfg;
  const StageLayout& sl = one.sl;
  OptimizerConfig oc;
  oc.weight_decay = 0.1;
  const std::string what = std::string(precision_name(precision)) + ", ZeRO-" + std::to_string(zero);
  ParamStore with(sl, one.dp, zero_policy(zero), 100, "adamw", oc, one.tracer, DType::f32, precision);
  ParamStore without(sl, one.dp, zero_policy(zero), 100, "adamw", oc, one.tracer, DType::f32, Precision::fp32);
  // Memory: the whole copy (ZeRO 0-2) and the shard's (1-3) with the gather's small tables.
  const size_t extra = with.memory().params - without.memory().params,
               want = 2 * ((zero < 3 ? sl.local_size() : 0) + (zero > 0 ? with.shards().shard_size() : 0));
  EXPECT_GE(extra, want) << what;
  EXPECT_LT(extra, want + sl.local_size()) << what;
  // Every unit's copy is its masters rounded, bit for bit (ZeRO-3: of the units whose matrices
  // travel in 16 bits, while the stage would hold them).
  auto check_copy = [&](int step) {
    const std::vector<float> p = with.local_values("params");
    const std::vector<uint16_t> want = rounded(p, precision);
    int checked = 0;
    for (size_t u = 0; u < sl.units().size(); ++u) {
      const Range ur = sl.units()[u].range;
      with.params(int(u));
      const uint16_t* low = with.low_params(int(u));
      if (low) {
        ++checked;
        const auto got = to_host<uint16_t>(Vec<const uint16_t>(low, ur.size()));
        for (const TensorInfo& t : sl.tensors()) {  // what GEMMs read: the blocks' matrices and the head's wte
          const bool matrix = (t.layer >= 0 && t.shape.size() == 2) || (t.kind == Param::wte && zero < 3);
          for (size_t i = std::max(t.range.begin, ur.begin); matrix && i < std::min(t.range.end, ur.end); ++i)
            ASSERT_EQ(got[i - ur.begin], want[i]) << what << ", step " << step << ", unit " << u << ", value " << i;
        }
      }
      with.release_params(int(u));
    }
    EXPECT_EQ(checked, zero < 3 ? int(sl.units().size()) : cfg.n_layer) << what;
  };
  const std::vector<float> got = train_through_store(with, sl, precision, 11, 4, check_copy);
  const std::vector<float> ref = train_through_store(without, sl, precision, 11, 4);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], ref[i]) << what << ", loss " << i;
}
}  // namespace

TEST(ParamStore, WorkingCopyTrainsAsRoundingPerGemm) {
  for (Precision p : {Precision::bf16, Precision::fp16})
    for (int zero : {0, 1, 2, 3}) expect_copy_trains_as_rounding_per_gemm(p, zero);
}

// The shard plan: each rank holds whole rows of every tensor, one run of its shard, the optimizer
// list saying which rows (a vector's rows are its values); over the ranks every row is held once,
// also where the rows do not divide (D 3: 16 rows of 16, wpe's 8 rows); buckets of about 37 values
// make most tensors span several. Without sharding each tensor is whole.
TEST(ShardLayout, EachRankHoldsWholeRowsOfEveryTensorAsOneRun) {
  const ModelConfig cfg = tiny(2);
  const ParamLayout layout(cfg);
  for (int D : {1, 2, 3, 4}) {
    const StageLayout sl(layout, {{0, cfg.n_layer}}, {}, size_t(D));
    std::map<std::pair<int, int>, std::vector<int>> held;  // (kind, layer) -> times each row is held
    for (const TensorInfo& t : sl.tensors()) held[{int(t.kind), t.layer}].assign(t.shape[0], 0);
    for (int r = 0; r < D; ++r) {
      const ShardLayout shards(sl, D, r, 37);
      std::set<std::pair<int, int>> seen;
      for (const TensorShard& t : shards.optimizer_shards()) {
        const TensorInfo& whole = *std::find_if(sl.tensors().begin(), sl.tensors().end(),
                                                [&](const TensorInfo& w) { return w.name() == t.name; });
        EXPECT_TRUE(seen.insert({int(whole.kind), whole.layer}).second) << t.name << " twice, D " << D << " rank " << r;
        const std::vector<size_t> s = t.held_shape();
        size_t n = 1;
        for (size_t d : s) n *= d;
        EXPECT_EQ(n, t.run.size()) << t.name << ": the run is not its rows, D " << D << " rank " << r;
        const std::vector<Range> rows = shards.rows_of(whole, r);
        ASSERT_EQ(t.rows.size(), rows.size()) << t.name;
        for (size_t i = 0; i < rows.size(); ++i)
          EXPECT_TRUE(t.rows[i].begin == rows[i].begin && t.rows[i].end == rows[i].end) << t.name;
        for (const Range& rows : t.rows)
          for (size_t i = rows.begin; i < rows.end; ++i) ++held[{int(whole.kind), whole.layer}][i];
        if (D == 1) {
          EXPECT_TRUE(t.whole()) << t.name;
        }
      }
    }
    for (const auto& [key, times] : held)
      for (size_t i = 0; i < times.size(); ++i)
        EXPECT_EQ(times[i], 1) << "D " << D << ": row " << i << " of tensor kind " << key.first << " layer " << key.second;
  }
}

// Every bucket of a sharded layout is whole rows of one row length: a matrix's, or vectors' values.
TEST(ShardLayout, BucketsLieInOneSegment) {
  const ModelConfig cfg = tiny(2);
  const StageLayout sl(ParamLayout(cfg), {{0, cfg.n_layer}}, {}, 3);
  const ShardLayout shards(sl, 3, 1, 37);
  for (const Bucket& b : shards.buckets()) {
    int in = 0;
    for (const RowSegment& s : sl.segments())
      if (s.range.begin <= b.range.begin && b.range.end <= s.range.end) {
        ++in;
        EXPECT_EQ(b.range.size() % (3 * s.row_len), 0u);
      }
    EXPECT_EQ(in, 1) << "bucket [" << b.range.begin << ", " << b.range.end << ")";
  }
  EXPECT_THROW(ShardLayout(StageLayout(ParamLayout(cfg), 0, cfg.n_layer), 3, 0, 37), std::runtime_error);
}

// A weight gradient's product stores its sum (beta 0) where nothing was added to the region since it
// was zeroed (UnitStore::first_write), and adds to it otherwise: the gradients equal those of a
// store that always adds (the stage's own buffers), bit for bit, over accumulating microbatches.
namespace {
void expect_stored_products_equal_added(int microbatches, Precision precision) {
  OneRank one(2);
  const ModelConfig& cfg = one.cfg;
  const StageLayout& sl = one.sl;
  ParamStore store(sl, one.dp, zero_policy(0), 1000, "adamw", OptimizerConfig{}, one.tracer, DType::f32, precision);
  store.init(5);
  const int B = 2, T = 8, N = B * T;
  StageOptions<float> so;
  so.precision = precision;
  Stage<float> own(sl, B, T, so);
  so.store = &store;
  Stage<float> stored(sl, B, T, so);
  Kokkos::deep_copy(own.params, from_host<float>(store.local_values("params")));
  own.zero_grads();
  Buffer<float> losses("losses", N);
  auto a = stored.make_activations(B), b = own.make_activations(B);
  Rng r(13);
  auto ht = Kokkos::create_mirror_view(a.tokens);
  store.begin_step(0, microbatches);
  for (int mb = 0; mb < microbatches; ++mb) {
    for (size_t i = 0; i < ht.extent(0); ++i) ht(i) = int(r.below(cfg.vocab_size));
    a.load(ht.data(), ht.data());
    b.load(ht.data(), ht.data());
    for (auto [st, act] : {std::pair{&stored, &a}, std::pair{&own, &b}}) {
      st->forward(*act, Vec<float>(losses.data(), N), true, 1.0f / N);
      st->backward(*act);
    }
  }
  store.finish_gradients();
  const auto got = to_host<float>(Vec<const float>(store.grads(0), sl.local_size()));
  const auto want = to_host<float>(own.grads);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << microbatches << " microbatches, " << precision_name(precision) << ", value " << i;
}
}  // namespace

TEST(ParamStore, StoredProductsGiveTheAddedGradients) {
  // fp32 products store only where their library is faster so (oneDNN's, not OpenBLAS's): both.
  for (HostGemm f32 : {HostGemm::automatic, HostGemm::onednn}) {
    gemm_set_host_f32(f32);
    for (Precision p : {Precision::fp32, Precision::bf16})
      for (int m : {1, 3}) expect_stored_products_equal_added(m, p);
  }
  gemm_set_host_f32(HostGemm::automatic);
}

// What first_write answers: yes for a region nothing was added to since the step began (the whole
// gradients, ZeRO 0-1) or since the unit's workspace was taken (ZeRO 2-3, one a microbatch); no
// for any overlap with a region written before.
TEST(ParamStore, FirstWriteSaysWhetherNothingWasAdded) {
  OneRank one(2);
  const StageLayout& sl = one.sl;
  for (int zero : {0, 1, 2, 3}) {
    ParamStore store(sl, one.dp, zero_policy(zero), 1000, "adamw", OptimizerConfig{}, one.tracer);
    store.init(5);
    const int u = sl.unit_index(UnitKind::block, 1);
    const std::string what = "ZeRO-" + std::to_string(zero);
    for (int step = 0; step < 2; ++step) {
      store.begin_step(step, 2);
      for (int mb = 0; mb < 2; ++mb) {
        const float* g = store.grads(u);
        const bool fresh = mb == 0 || zero >= 2;  // a workspace of its own each microbatch
        EXPECT_EQ(store.first_write(u, g + 10, 20, true), fresh) << what << ", step " << step << ", microbatch " << mb;
        EXPECT_FALSE(store.first_write(u, g + 29, 5, true)) << what << ": overlaps the last value written";
        EXPECT_FALSE(store.first_write(u, g, 11, true)) << what << ": overlaps the first";
        EXPECT_EQ(store.first_write(u, g + 34, 6, true), fresh) << what << ": next to what was written";
        EXPECT_FALSE(store.first_write(u, g + 34, 6, true)) << what << ": written just now";
        EXPECT_FALSE(store.first_write(u, g, 0, true)) << what << ": nothing to write";
        EXPECT_FALSE(store.first_write(u, g + 50, 4, false)) << what << ": a writer that adds";
        store.grads_done(u, false);
      }
      store.finish_gradients();
    }
  }
}

// The update leaves the gradients a product stored over first (ZeRO-0: they are the optimizer's),
// and the next step's first writer stores over them again. Where that changes -- a writer that adds
// comes first, a store covers part of them, nobody writes them, the update was skipped -- they are 0
// before anyone reads them.
namespace {
struct KeptSteps {
  OneRank one{2};
  ParamStore store{one.sl, one.dp, zero_policy(0), 1000, "adamw", OptimizerConfig{}, one.tracer};
  const int u = one.sl.unit_index(UnitKind::block, 1), u0 = one.sl.unit_index(UnitKind::block, 0);
  KeptSteps() { store.init(5); }
  void fill(int unit, size_t at, size_t n, float v) {
    Kokkos::deep_copy(ExecSpace(), Vec<float>(store.grads(unit) + at, n), v);
  }
  std::vector<float> grads(int unit) {
    Kokkos::fence();
    return to_host<float>(Vec<const float>(store.grads(unit), one.sl.units()[size_t(unit)].range.size()));
  }
  void end(bool update = true) {
    store.finish_gradients();
    if (update) store.optimizer_step(1e-3, GradScale(1.0));
  }
};
// Values [b, e) of g all v, and the rest 0 (where the update left them).
void expect_only(const std::vector<float>& g, size_t b, size_t e, float v, const std::string& what) {
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], i >= b && i < e ? v : 0.0f) << what << ", value " << i;
}
}  // namespace

TEST(ParamStore, UpdateKeepsStoredGradientsForTheirNextStore) {
  KeptSteps k;
  const int u = k.u;
  k.store.begin_step(0, 1);
  ASSERT_TRUE(k.store.first_write(u, k.store.grads(u) + 10, 20, true));
  k.fill(u, 10, 20, 1.0f);
  ASSERT_FALSE(k.store.first_write(u, k.store.grads(u) + 40, 5, false));
  k.fill(u, 40, 5, 2.0f);
  k.end();
  expect_only(k.grads(u), 10, 30, 1.0f, "after the update: the stored region kept, the added one 0");

  k.store.begin_step(1, 1);  // the same writer: it stores over the kept values
  ASSERT_TRUE(k.store.first_write(u, k.store.grads(u) + 10, 20, true));
  expect_only(k.grads(u), 10, 30, 1.0f, "stored over, not zeroed first");
  k.fill(u, 10, 20, 3.0f);
  k.end();

  k.store.begin_step(2, 1);  // a writer that adds comes first: the whole kept region to 0
  ASSERT_FALSE(k.store.first_write(u, k.store.grads(u) + 15, 5, false));
  expect_only(k.grads(u), 0, 0, 0.0f, "an adder over part of a kept region");
  ASSERT_FALSE(k.store.first_write(u, k.store.grads(u) + 10, 20, true)) << "added to already";
  k.end();
  expect_only(k.grads(u), 0, 0, 0.0f, "nothing stored: nothing kept");

  k.store.begin_step(3, 1);
  ASSERT_TRUE(k.store.first_write(u, k.store.grads(u) + 10, 20, true));
  ASSERT_TRUE(k.store.first_write(k.u0, k.store.grads(k.u0) + 100, 8, true));
  k.fill(u, 10, 20, 4.0f), k.fill(k.u0, 100, 8, 5.0f);
  k.end();
  k.store.begin_step(4, 1);  // a store over part of a kept region; the rest 0
  ASSERT_TRUE(k.store.first_write(u, k.store.grads(u) + 20, 10, true));
  expect_only(k.grads(u), 0, 0, 0.0f, "a store over part of a kept region");
  k.fill(u, 20, 10, 6.0f);
  k.store.grads_done(u, false);  // u0: nobody writes it; the step's end (finish) sets it to 0
  k.end();
  expect_only(k.grads(u), 20, 30, 6.0f, "kept: what was stored this step");

  k.store.begin_step(5, 1);  // nobody writes u: its gradient is complete, and 0
  k.store.grads_done(u, false);
  expect_only(k.grads(u), 0, 0, 0.0f, "a kept region nobody wrote, when the unit is done");
  ASSERT_TRUE(k.store.first_write(k.u0, k.store.grads(k.u0) + 100, 8, true));
  k.fill(k.u0, 100, 8, 7.0f);
  k.end(false);  // the update skipped (a non-finite gradient): next step starts from 0
  k.store.begin_step(6, 1);
  expect_only(k.grads(k.u0), 0, 0, 0.0f, "after a skipped update");
  ASSERT_TRUE(k.store.first_write(k.u0, k.store.grads(k.u0) + 100, 8, true));
  k.end();
}

// Training on one rank with the stored gradients kept (ZeRO-0) equals it with every gradient zeroed
// by the update (ZeRO-1's reduce-scatter overwrites its shard), bit for bit; at 16 bits every weight
// gradient's product stores.
TEST(ParamStore, KeptGradientsTrainAsZeroedOnes) {
  OneRank one(2);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    ParamStore kept(one.sl, one.dp, zero_policy(0), 1000, "adamw", OptimizerConfig{}, one.tracer, DType::f32, p);
    ParamStore zeroed(one.sl, one.dp, zero_policy(1), 1000, "adamw", OptimizerConfig{}, one.tracer, DType::f32, p);
    const std::vector<float> got = train_through_store(kept, one.sl, p, 17, 4);
    const std::vector<float> want = train_through_store(zeroed, one.sl, p, 17, 4);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << precision_name(p) << ", loss " << i;
    EXPECT_EQ(kept.local_values("params"), zeroed.local_values("params")) << precision_name(p);
  }
}
