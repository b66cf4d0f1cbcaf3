// Muon and Lion against their published algorithms, written out here in double on hand-made
// matrices: Muon's update (momentum with Nesterov, the Newton-Schulz quintic on the Frobenius-
// normalised update, transposed when rows > cols, the max(1, rows/cols)^0.5 scale, decoupled decay;
// AdamW for the other tensors), the singular values Newton-Schulz leaves, and Lion's update.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/shard_list.hpp"
#include "plugins/optimizer.hpp"
#include "tensor/muon_update.hpp"
#include "test_util.hpp"

using namespace gpt2;
using namespace gpt2::test;

namespace {
using Matrix = std::vector<double>;  // row-major
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;  // the published quintic, written out here

Matrix multiply(const Matrix& a, const Matrix& b, int m, int k, int n, bool transpose_b = false) {
  Matrix c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < k; ++l) c[size_t(i) * n + j] += a[size_t(i) * k + l] * (transpose_b ? b[size_t(j) * k + l] : b[size_t(l) * n + j]);
  return c;
}

Matrix transpose(const Matrix& a, int rows, int cols) {
  Matrix t(a.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c) * rows + r] = a[size_t(r) * cols + c];
  return t;
}

// The published zeroth power: G (rows, cols) -> its orthogonalised update, in double.
Matrix newton_schulz_reference(const Matrix& g, int rows, int cols, int steps) {
  const bool tall = rows > cols;
  Matrix x = tall ? transpose(g, rows, cols) : g;
  const int m = std::min(rows, cols), n = std::max(rows, cols);
  double norm = 0;
  for (double v : x) norm += v * v;
  for (double& v : x) v /= std::sqrt(norm) + 1e-7;
  for (int s = 0; s < steps; ++s) {
    const Matrix a = multiply(x, x, m, n, m, true), aa = multiply(a, a, m, m, m);
    Matrix b(a.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = kB * a[i] + kC * aa[i];
    const Matrix bx = multiply(b, x, m, m, n);
    for (size_t i = 0; i < x.size(); ++i) x[i] = kA * x[i] + bx[i];
  }
  return tall ? transpose(x, m, n) : x;
}

// Eigenvalues of a symmetric matrix (cyclic Jacobi), ascending.
std::vector<double> symmetric_eigenvalues(Matrix a, int n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += a[size_t(p) * n + q] * a[size_t(p) * n + q];
    if (off < 1e-30) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = a[size_t(p) * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[size_t(q) * n + q] - a[size_t(p) * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[size_t(k) * n + p], akq = a[size_t(k) * n + q];
          a[size_t(k) * n + p] = c * akp - s * akq, a[size_t(k) * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[size_t(p) * n + k], aqk = a[size_t(q) * n + k];
          a[size_t(p) * n + k] = c * apk - s * aqk, a[size_t(q) * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> e(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) e[size_t(i)] = a[size_t(i) * n + i];
  std::sort(e.begin(), e.end());
  return e;
}

std::vector<double> singular_values(const Matrix& x, int m, int n) {  // m <= n
  std::vector<double> e = symmetric_eigenvalues(multiply(x, x, m, n, m, true), m);
  for (double& v : e) v = std::sqrt(std::max(v, 0.0));
  return e;
}

TensorInfo tensor(Param kind, std::vector<size_t> shape, size_t begin) {
  size_t n = 1;
  for (size_t s : shape) n *= s;
  return TensorInfo{kind, 0, shape, {begin, begin + n}, shape.size() >= 2, {}};
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
}  // namespace

// The kernels in double: the same numbers as the reference, to rounding.
TEST(Muon, NewtonSchulzKernelsMatchThePublishedIterationInDouble) {
  for (const auto& shape : {std::pair<int, int>{5, 9}, {9, 5}, {7, 7}}) {
    const int rows = shape.first, cols = shape.second, m = std::min(rows, cols);
    const std::vector<double> g = random_vector(size_t(rows) * cols, 11 + rows);
    auto gb = from_host(g), mom = from_host(std::vector<double>(g.size(), 0.0));
    Buffer<double> x("x", g.size()), y("y", g.size()), a("a", size_t(m) * m), b("b", size_t(m) * m), s("s", 1);
    muon_momentum<double>(gb, mom, x, 0.0, GradScale(1.0));  // momentum 0: U = G
    const Vec<double> o = newton_schulz5<double>(x, y, a, b, rows, cols, 5, DeviceScalar(s.data()));
    auto p = from_host(std::vector<double>(g.size(), 0.0));
    muon_apply<double>(p, o, 1.0, 0.0, 1.0, {});  // p = -O
    const std::vector<double> ours = to_host(p), ref = newton_schulz_reference(g, rows, cols, 5);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(-ours[i], ref[i], 1e-12) << rows << "x" << cols << " " << i;
  }
}

// train.ns_dtype = "bf16": the products read bf16 roundings (fp32 accumulation). Near the fp32
// iteration -- bf16's 8 bits, not identical -- and its singular values in the same band.
TEST(Muon, NewtonSchulzWithBf16ProductsStaysNearFp32InTheBand) {
  for (const auto& shape : {std::pair<int, int>{24, 40}, {40, 24}}) {
    const int rows = shape.first, cols = shape.second, m = std::min(rows, cols);
    const size_t n = size_t(rows) * cols;
    const std::vector<double> g = random_vector(n, 31 + rows);
    std::vector<float> out[2];
    for (int low = 0; low < 2; ++low) {
      auto x = from_host(std::vector<float>(g.begin(), g.end()));
      Buffer<float> y("y", n), a("a", size_t(m) * m), b("b", size_t(m) * m);
      Buffer<double> s("s", 1);
      Buffer<bf16> x16("x16", low ? n : 0), a16("a16", low ? size_t(m) * m : 0), b16("b16", low ? size_t(m) * m : 0);
      const NewtonSchulzLowp lp{x16, a16, b16};
      const Vec<float> o = newton_schulz5<float>(x, y, a, b, rows, cols, 5, DeviceScalar(s.data()), lp);
      out[low] = to_host(CVec<float>(o));
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) diff += std::pow(double(out[1][i]) - out[0][i], 2), norm += std::pow(out[0][i], 2);
    EXPECT_LT(std::sqrt(diff / norm), 3e-2) << rows << "x" << cols;
    EXPECT_GT(std::sqrt(diff / norm), 1e-4) << "the bf16 products took effect";
    std::vector<double> o(out[1].begin(), out[1].end());
    if (rows > cols) o = transpose(o, rows, cols);
    for (double sv : singular_values(o, m, std::max(rows, cols))) {
      EXPECT_GT(sv, 0.5);
      EXPECT_LT(sv, 1.5);
    }
  }
}

// What Newton-Schulz does to the spectrum: each singular value s of the normalised update becomes
// p(p(p(p(p(s))))), p(x) = a x + b x^3 + c x^5, and the quintic's published band holds them
// within (0.5, 1.5) -- not 1, which its speed is traded for.
TEST(Muon, NewtonSchulzMapsEachSingularValueThroughTheQuinticIntoItsBand) {
  const int m = 8, n = 24;
  const std::vector<double> g = random_vector(size_t(m) * n, 5);
  double norm = 0;
  for (double v : g) norm += v * v;
  std::vector<double> sv = singular_values(g, m, n);
  const Matrix o = newton_schulz_reference(g, m, n, 5);
  const std::vector<double> out = singular_values(o, m, n);
  std::vector<double> mapped;
  for (double s : sv) {
    s /= std::sqrt(norm) + 1e-7;
    for (int k = 0; k < 5; ++k) s = kA * s + kB * s * s * s + kC * s * s * s * s * s;
    mapped.push_back(s);
  }
  std::sort(mapped.begin(), mapped.end());  // (p^5 is not monotone here: compare the sorted sets)
  for (int i = 0; i < m; ++i) {
    EXPECT_NEAR(out[size_t(i)], mapped[size_t(i)], 1e-9) << i;
    EXPECT_GT(out[size_t(i)], 0.5);
    EXPECT_LT(out[size_t(i)], 1.5);
  }
}

// The optimizer (fp32) over a tall and a wide block matrix and a bias, two steps, the second at half
// the rate and with a clipping factor, against the published algorithm in double.
TEST(Muon, TwoStepsEqualThePublishedAlgorithm) {
  const std::vector<TensorInfo> ts = {tensor(Param::qkvw, {10, 6}, 0), tensor(Param::qkvb, {10}, 60),
                                      tensor(Param::fcprojw, {6, 10}, 70)};
  const size_t n = 130;
  OptimizerConfig cfg;
  cfg.lr = 1e-3, cfg.muon_lr = 0.02, cfg.muon_momentum = 0.95, cfg.weight_decay = 0.1, cfg.ns_steps = 5;
  const std::vector<TensorShard> shards = tensor_shards(ts);
  std::unique_ptr<Optimizer> opt = make_optimizer("muon", shards, n, cfg);
  const std::vector<double> p0 = random_vector(n, 1, 0.1);
  std::vector<float> pf(p0.begin(), p0.end());
  auto params = from_host(pf);
  std::vector<double> p = p0, mom(n, 0.0), am(n, 0.0), av(n, 0.0);
  const double lrs[2] = {1e-3, 5e-4}, scales[2] = {1.0, 0.5};
  for (int step = 0; step < 2; ++step) {
    const std::vector<double> g = random_vector(n, 20 + step);
    std::vector<float> gf(g.begin(), g.end());
    auto grads = from_host(gf);
    const std::vector<double> before = p;
    opt->step({shards, params, grads, {}}, {lrs[step], GradScale(scales[step]), true});
    for (const TensorInfo& t : ts) {
      const size_t b = t.range.begin, len = t.range.size();
      if (t.shape.size() == 2) {  // Muon
        const int rows = int(t.shape[0]), cols = int(t.shape[1]);
        Matrix u(len);
        for (size_t i = 0; i < len; ++i) {
          const double gi = g[b + i] * scales[step];
          mom[b + i] = 0.95 * mom[b + i] + 0.05 * gi;
          u[i] = 0.05 * gi + 0.95 * mom[b + i];
        }
        const Matrix o = newton_schulz_reference(u, rows, cols, 5);
        const double lr = 0.02 * lrs[step] / 1e-3, scale = std::sqrt(std::max(1.0, double(rows) / cols));
        for (size_t i = 0; i < len; ++i) p[b + i] = p[b + i] * (1 - lr * 0.1) - lr * scale * o[i];
      } else {  // AdamW (no decay on a bias)
        for (size_t i = 0; i < len; ++i) {
          const double gi = g[b + i] * scales[step];
          am[b + i] = 0.9 * am[b + i] + 0.1 * gi, av[b + i] = 0.95 * av[b + i] + 0.05 * gi * gi;
          const double mh = am[b + i] / (1 - std::pow(0.9, step + 1)), vh = av[b + i] / (1 - std::pow(0.95, step + 1));
          p[b + i] -= lrs[step] * mh / (std::sqrt(vh) + 1e-8);
        }
      }
    }
    const std::vector<float> ours = to_host(params), left = to_host(grads);
    std::vector<double> d_ref(n), err(n);
    for (size_t i = 0; i < n; ++i) d_ref[i] = p[i] - before[i], err[i] = double(ours[i]) - p[i];
    EXPECT_LT(max_abs(err), 1e-5 * max_abs(d_ref)) << "step " << step + 1;
    EXPECT_EQ(max_abs(std::vector<double>(left.begin(), left.end())), 0.0) << "gradients left 0";
    std::vector<double> pd(ours.begin(), ours.end());
    p = pd;  // (the next step from our values, so errors do not pile up)
  }
  const auto state = opt->state();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[2].first, "momentum");
}

TEST(Muon, RefusesAMatrixThatIsNotWholeOnTheRank) {
  std::vector<TensorInfo> ts = {tensor(Param::fcw, {8, 4}, 0)};
  ts[0].range.end = 16;  // a ZeRO fragment: half the matrix
  EXPECT_THROW(make_optimizer("muon", tensor_shards(ts), 16, OptimizerConfig()), std::exception);
}

TEST(Lion, TwoStepsEqualThePaper) {
  const std::vector<TensorInfo> ts = {tensor(Param::fcw, {4, 5}, 0), tensor(Param::fcb, {4}, 20)};
  const size_t n = 26;  // (two values no tensor covers: their gradients are only zeroed)
  OptimizerConfig cfg;
  cfg.beta1 = 0.9, cfg.beta2 = 0.99, cfg.weight_decay = 0.5;
  const std::vector<TensorShard> shards = tensor_shards(ts);
  std::unique_ptr<Optimizer> opt = make_optimizer("lion", shards, n, cfg);
  const std::vector<double> p0 = random_vector(n, 3);
  auto params = from_host(std::vector<float>(p0.begin(), p0.end()));
  std::vector<double> p = p0, m(n, 0.0);
  for (int step = 0; step < 2; ++step) {
    const std::vector<double> g = random_vector(n, 30 + step);
    auto grads = from_host(std::vector<float>(g.begin(), g.end()));
    const double lr = 1e-2 / (step + 1), scale = step ? 0.25 : 1.0;
    opt->step({shards, params, grads, {}}, {lr, GradScale(scale), true});
    for (size_t i = 0; i < 24; ++i) {
      const double gi = g[i] * scale, c = 0.9 * m[i] + 0.1 * gi, wd = i < 20 ? 0.5 : 0.0;
      p[i] = p[i] * (1 - lr * wd) - lr * ((c > 0) - (c < 0));
      m[i] = 0.99 * m[i] + 0.01 * gi;
    }
    const std::vector<float> ours = to_host(params), left = to_host(grads);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ours[i], p[i], 2e-6) << "step " << step + 1 << " " << i;
      EXPECT_EQ(left[i], 0.0f) << i;
    }
  }
  EXPECT_EQ(opt->name(), "lion");
}

// AdamW on the tensor interface: shards of all three groups, a gap no shard covers, a matrix split
// into two runs (a ZeRO rank's part of it), three steps with clipping factors. Against the fused
// kernel run element-wise over each tensor with its own decay (the flat update AdamW was before the
// interface): the same numbers to 1e-7; against AdamW in double to 1e-5 of the update.
TEST(AdamW, TensorShardsStepEqualsTheFlatUpdateAndTheAlgorithm) {
  const std::vector<TensorInfo> ts = {tensor(Param::wte, {6, 4}, 0), tensor(Param::ln1w, {4}, 24),
                                      tensor(Param::qkvw, {12, 4}, 30), tensor(Param::qkvb, {12}, 78)};
  std::vector<TensorShard> shards = tensor_shards(ts);  // the gap: [28, 30)
  TensorShard tail = shards[2];                         // qkvw in two runs
  shards[2].run.end = 54, tail.run.begin = 54;
  shards.insert(shards.begin() + 3, tail);
  ASSERT_EQ(shards[2].group, ParamGroup::matrices);
  ASSERT_EQ(shards[1].group, ParamGroup::plain);
  const size_t n = 90;
  OptimizerConfig cfg;
  cfg.beta1 = 0.9, cfg.beta2 = 0.95, cfg.eps = 1e-8, cfg.weight_decay = 0.1;
  std::unique_ptr<Optimizer> opt = make_optimizer("adamw", shards, n, cfg);
  const std::vector<double> p0 = random_vector(n, 5, 0.1);
  auto params = from_host(std::vector<float>(p0.begin(), p0.end()));
  auto flat = from_host(std::vector<float>(p0.begin(), p0.end()));
  Buffer<float> fm("fm", n), fv("fv", n);
  std::vector<double> p = p0, m(n, 0.0), v(n, 0.0);
  for (int step = 0; step < 3; ++step) {
    const std::vector<double> g = random_vector(n, 40 + step);
    auto grads = from_host(std::vector<float>(g.begin(), g.end()));
    auto flat_grads = from_host(std::vector<float>(g.begin(), g.end()));
    const double lr = 1e-2 / (step + 1), scale = step == 1 ? 0.5 : 1.0;
    opt->step({shards, params, grads, {}}, {lr, GradScale(scale), true});
    AdamWStep a;
    a.lr = lr, a.beta1 = 0.9, a.beta2 = 0.95, a.eps = 1e-8, a.grad_scale = GradScale(scale), a.step = step + 1;
    for (const TensorInfo& t : ts) {
      const size_t b = t.range.begin, len = t.range.size();
      a.weight_decay = t.decay ? 0.1 : 0.0;
      adamw_update<float>(Vec<float>(flat.data() + b, len), Vec<float>(flat_grads.data() + b, len),
                          Vec<float>(fm.data() + b, len), Vec<float>(fv.data() + b, len), a, {});
      for (size_t i = b; i < b + len; ++i) {
        const double gi = g[i] * scale;
        m[i] = 0.9 * m[i] + 0.1 * gi, v[i] = 0.95 * v[i] + 0.05 * gi * gi;
        const double mh = m[i] / (1 - std::pow(0.9, step + 1)), vh = v[i] / (1 - std::pow(0.95, step + 1));
        p[i] = p[i] * (1 - lr * a.weight_decay) - lr * mh / (std::sqrt(vh) + 1e-8);
      }
    }
    const std::vector<float> ours = to_host(params), theirs = to_host(flat), left = to_host(grads);
    for (size_t i = 0; i < n; ++i) {
      const bool covered = i < 28 || i >= 30;
      EXPECT_NEAR(ours[i], theirs[i], 1e-7) << "step " << step + 1 << " value " << i;
      if (covered) {
        EXPECT_NEAR(ours[i], p[i], 1e-5 * lr) << "step " << step + 1 << " value " << i;
      }
      EXPECT_EQ(left[i], 0.0f) << "gradient " << i << " left after the step";
    }
    for (size_t i = 0; i < n; ++i) p[i] = ours[i];  // (the next step from our values)
  }
}
