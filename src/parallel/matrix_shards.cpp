#include "parallel/matrix_shards.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "parallel/index_table.hpp"
#include "tensor/indexed_copy.hpp"

namespace gpt2 {

namespace {
constexpr int kTag = 0x4d55;  // the exchanges' point-to-point messages

bool row_parallel(const TensorInfo& t) { return t.kind == Param::attprojw || t.kind == Param::fcprojw; }

Range run_in_shard(const ShardLayout& shards, const TensorInfo& t) {
  for (const TensorInfo& s : shards.shard_tensors())
    if (s.kind == t.kind && s.layer == t.layer) return s.range;
  return {0, 0};  // (a rank may hold none of a small matrix's rows)
}
}  // namespace

CommMatrixShards::CommMatrixShards(const StageLayout& layout, const ShardLayout& shards, Communicator& replicas,
                                   Communicator& tp)
    : replicas_(replicas), tp_(tp), D_(shards.ranks()), me_(shards.ranks() > 1 ? replicas.rank() : 0) {
  if (D_ > 1 && D_ != replicas.size()) fail("CommMatrixShards: the shards are not over the replica group");
  const int T = tp.size();
  std::vector<double> cost;
  for (const TensorInfo& t : layout.tensors()) {
    if (!block_matrix(t)) continue;
    Parts p;
    Matrix m;
    p.local = t.range.size();
    p.columns = T > 1 && row_parallel(t);
    m.rows = int(t.shape[0]) * (T > 1 && !p.columns ? T : 1);
    m.cols = int(t.shape[1]) * (p.columns ? T : 1);
    // The shard plan's rows of the matrix, rank by rank (a row's values one after another).
    const size_t row = row_length(t);
    p.held.resize(size_t(D_));
    for (int q = 0; q < D_; ++q)
      for (const Range& r : shards.rows_of(t, q)) p.held[size_t(q)].push_back({r.begin * row, r.end * row});
    m.run = run_in_shard(shards, t);
    cost.push_back(newton_schulz_flops(m.rows, m.cols, 1));
    matrices_.push_back(m);
    parts_.push_back(std::move(p));
  }
  deal_out(cost);
  size_t slices = 0, stacked = 0;
  stacked_at_.assign(matrices_.size(), 0);
  for (size_t i = 0; i < matrices_.size(); ++i) {
    Matrix& m = matrices_[i];
    if (!m.owned) continue;
    m.at = owned_size_;
    owned_size_ += size_t(m.rows) * size_t(m.cols);
    if (D_ > 1 && T > 1) parts_[i].local_at = slices, slices += parts_[i].local;
    if (parts_[i].columns) stacked_at_[i] = stacked, stacked += size_t(m.rows) * size_t(m.cols);
  }
  slices_ = Buffer<float>("matrix_slices", slices);
  stacked_ = Buffer<float>("matrix_stacked", stacked);
  if (D_ > 1) plan_staging();
}

size_t CommMatrixShards::slice_at(size_t i) const { return tp_.size() == 1 ? matrices_[i].at : parts_[i].local_at; }

// For each owned matrix, the other replica ranks' runs of it, rank by rank, and where each of their
// values goes in the owned slices.
void CommMatrixShards::plan_staging() {
  std::vector<int32_t> to;
  for (size_t i = 0; i < parts_.size(); ++i) {
    Parts& p = parts_[i];
    p.staged_at.assign(size_t(D_), 0);
    if (p.owner != me_) continue;
    for (int q = 0; q < D_; ++q) {
      if (q == me_) continue;
      p.staged_at[size_t(q)] = to.size();
      for (const Range& r : p.held[size_t(q)])
        for (size_t j = r.begin; j < r.end; ++j) {
          const size_t at = slice_at(i) + j;
          if (at > size_t(INT32_MAX)) fail("CommMatrixShards: owned slices of over 2^31 values");
          to.push_back(int32_t(at));
        }
    }
  }
  staged_ = Buffer<float>("matrix_staged", to.size());
  staged_to_ = index_table("matrix_staged_to", to);
}

void CommMatrixShards::deal_out(const std::vector<double>& cost) {
  const std::vector<int> owner = deal_by_cost(cost, D_);
  for (size_t i = 0; i < parts_.size(); ++i) parts_[i].owner = owner[i], matrices_[i].owned = owner[i] == me_;
}

float* CommMatrixShards::slice_of(size_t i, float* owned, float* runs) {
  if (tp_.size() == 1) return owned + matrices_[i].at;
  if (D_ > 1) return slices_.data() + parts_[i].local_at;
  return runs + matrices_[i].run.begin;  // the rank holds its whole slice
}

Vec<float> CommMatrixShards::base(float* owned) const {
  return tp_.size() == 1 ? vec(owned, owned_size_) : vec(slices_.data(), slices_.extent(0));
}

void CommMatrixShards::exchange(bool gather, Vec<float> all, float* runs) {
  const DType f = DType::f32;
  const size_t staged = staged_.extent(0);
  float* base = all.data();
  if (!gather && staged) pack_at<float>(vec(staged_.data(), staged), all, staged_to_);
  std::vector<Request> pending;
  replicas_.group_start();
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Parts& p = parts_[i];
    if (p.owner == me_) {
      for (int q = 0; q < D_; ++q) {
        size_t n = 0;
        for (const Range& r : p.held[size_t(q)]) n += r.size();
        if (q == me_ || n == 0) continue;
        float* s = staged_.data() + p.staged_at[size_t(q)];
        pending.push_back(gather ? replicas_.irecv(s, n, f, q, kTag) : replicas_.isend(s, n, f, q, kTag));
      }
      continue;
    }
    const Range run = matrices_[i].run;  // the rank's ranges of the matrix, one after another
    if (run.size())
      pending.push_back(gather ? replicas_.isend(runs + run.begin, run.size(), f, p.owner, kTag)
                               : replicas_.irecv(runs + run.begin, run.size(), f, p.owner, kTag));
  }
  replicas_.group_end();
  for (size_t i = 0; i < parts_.size(); ++i) {  // the owner's own parts
    if (parts_[i].owner != me_) continue;
    size_t at = matrices_[i].run.begin;
    for (const Range& r : parts_[i].held[size_t(me_)]) {
      const Vec<float> slice = vec(base + slice_at(i) + r.begin, r.size()), run = vec(runs + at, r.size());
      if (gather) Kokkos::deep_copy(ExecSpace(), slice, run);
      else Kokkos::deep_copy(ExecSpace(), run, slice);
      at += r.size();
    }
  }
  for (Request& r : pending) replicas_.order_after(r);
  if (gather && staged) unpack_to<float>(all, vec(staged_.data(), staged), staged_to_);
}

void CommMatrixShards::gather(const float* runs_in, float* owned) {
  float* runs = const_cast<float*>(runs_in);  // (read only: gathering sends from the runs)
  std::vector<float*> slices(parts_.size(), nullptr);
  for (size_t i = 0; i < parts_.size(); ++i)
    if (matrices_[i].owned) slices[i] = slice_of(i, owned, runs);
  if (D_ > 1) exchange(true, base(owned), runs);
  const int T = tp_.size();
  if (T == 1) return;
  // The owners' tp peers own the same matrices: each all-gathers its slices.
  std::vector<Request> pending;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!matrices_[i].owned) continue;
    float* whole = owned + matrices_[i].at;
    float* to = parts_[i].columns ? stacked_.data() + stacked_at_[i] : whole;
    pending.push_back(tp_.iall_gather(slices[i], to, parts_[i].local, DType::f32));
  }
  for (Request& r : pending) tp_.order_after(r);
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Matrix& m = matrices_[i];
    if (!m.owned || !parts_[i].columns) continue;
    const size_t n = size_t(m.rows) * size_t(m.cols);
    interleave_columns<float>(vec(owned + m.at, n), vec(stacked_.data() + stacked_at_[i], n), m.rows,
                              m.cols / T, T);
  }
}

void CommMatrixShards::scatter(const float* owned_in, float* runs) {
  float* owned = const_cast<float*>(owned_in);  // (read only)
  const int T = tp_.size();
  for (size_t i = 0; i < parts_.size() && T > 1; ++i) {  // this tp rank's slice into its place
    const Matrix& m = matrices_[i];
    if (!m.owned) continue;
    const size_t local = parts_[i].local, n = size_t(m.rows) * size_t(m.cols);
    const Vec<float> whole = vec(owned + m.at, n), slice = vec(slice_of(i, owned, runs), local);
    if (parts_[i].columns) take_column_block<float>(slice, whole, m.rows, m.cols / T, T, tp_.rank());
    else Kokkos::deep_copy(ExecSpace(), slice, vec(whole.data() + size_t(tp_.rank()) * local, local));  // a block of rows
  }
  if (D_ > 1) exchange(false, base(owned), runs);
}

}  // namespace gpt2
