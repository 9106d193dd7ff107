#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>

#include "sharding/kmeans.h"
#include "sharding/linalg.h"
#include "sharding/pca.h"
#include "sharding/shard_test_util.h"

namespace strata {
namespace {

TEST(LinalgTest, SymmetricEigenOfAKnownMatrix) {
  // Q diag(5, 2, -1) Q^T with a rotation Q about the z axis by 30 degrees.
  const double c = std::cos(0.5235987755982988),
               s = std::sin(0.5235987755982988);
  const double q[9] = {c, -s, 0, s, c, 0, 0, 0, 1};
  const double ev[3] = {5, 2, -1};
  std::vector<double> a(9, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k)
        a[i * 3 + j] += q[i * 3 + k] * ev[k] * q[j * 3 + k];
  std::vector<double> values, vectors;
  SymmetricEigen(a, 3, &values, &vectors);
  EXPECT_NEAR(values[0], 5, 1e-12);
  EXPECT_NEAR(values[1], 2, 1e-12);
  EXPECT_NEAR(values[2], -1, 1e-12);
  for (int k = 0; k < 3; ++k) {  // A v = lambda v
    for (int i = 0; i < 3; ++i) {
      double av = 0;
      for (int j = 0; j < 3; ++j) av += a[i * 3 + j] * vectors[j * 3 + k];
      EXPECT_NEAR(av, values[k] * vectors[i * 3 + k], 1e-12);
    }
  }
}

TEST(LinalgTest, OrthonormalizeColumnsOfAnIllConditionedMatrix) {
  const int64_t n = 500, l = 6;
  std::mt19937_64 rng(3);
  std::vector<float> y(n * l);
  FillGaussian(rng, y.data(), n * l);
  // Column scales from 1 to 1e-5: condition number ~1e5.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < l; ++j) y[i * l + j] *= std::pow(10.0f, -float(j));
  const std::vector<float> orig = y;
  OrthonormalizeColumns(y.data(), n, l, 2);
  for (int64_t a = 0; a < l; ++a) {
    for (int64_t b = 0; b < l; ++b) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i)
        dot += double(y[i * l + a]) * y[i * l + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5) << a << "," << b;
    }
  }
  // Same span: the first original column lies in the span of the first Q
  // column (the factor is triangular).
  double proj = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    proj += double(orig[i * l]) * y[i * l];
    norm += double(orig[i * l]) * orig[i * l];
  }
  EXPECT_NEAR(std::fabs(proj), std::sqrt(norm), 1e-4 * std::sqrt(norm));
}

TEST(LinalgTest, ParallelChunksCoversEveryIndexOnce) {
  std::vector<int> hits(1001, 0);
  ParallelChunks(1001, 64, 3, [&](int64_t c, int64_t b, int64_t e) {
    EXPECT_EQ(b, c * 64);
    for (int64_t i = b; i < e; ++i) ++hits[i];
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

// Rank-3 data plus a mean offset: PCA must find the 3-d subspace, the
// variance along it, and reconstruct the data exactly. With d = 30 the
// Krylov basis would cover everything, so that case is the exact fallback;
// d = 200 runs the real block Krylov and power iterations.
struct PcaCase {
  PcaSolver solver;
  int64_t d;
};
class LowRankPcaTest : public ::testing::TestWithParam<PcaCase> {};

TEST_P(LowRankPcaTest, RecoversAKnownLowRankStructure) {
  const int64_t n = 400, d = GetParam().d, r = 3;
  std::mt19937_64 rng(5);
  std::vector<float> basis(r * d), coeff(n * r), mean(d);
  FillGaussian(rng, basis.data(), r * d);
  // Orthonormal rows for the basis (so the true variances are known).
  {
    std::vector<float> bt(d * r);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < d; ++j) bt[j * r + i] = basis[i * d + j];
    OrthonormalizeColumns(bt.data(), d, r, 2);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < d; ++j) basis[i * d + j] = bt[j * r + i];
  }
  const float scale[3] = {10, 4, 1};
  FillGaussian(rng, coeff.data(), n * r);
  FillGaussian(rng, mean.data(), d);
  std::vector<float> x(n * d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double v = 3.0 * mean[j];
      for (int64_t k = 0; k < r; ++k)
        v += scale[k] * coeff[i * r + k] * basis[k * d + j];
      x[i * d + j] = static_cast<float>(v);
    }
  // The exact covariance eigenvalues (of the sample) for comparison.
  std::vector<double> mu(d, 0), cov(d * d, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mu[j] += x[i * d + j] / double(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < d; ++a)
      for (int64_t b = 0; b < d; ++b)
        cov[a * d + b] +=
            (x[i * d + a] - mu[a]) * (x[i * d + b] - mu[b]) / double(n - 1);
  std::vector<double> evals, evecs;
  SymmetricEigen(cov, d, &evals, &evecs);

  PcaOptions o;
  o.n_components = 5;  // more than the rank: the extra ones carry ~nothing
  o.seed = 1;
  o.solver = GetParam().solver;
  auto pca = RandomizedPca(x.data(), n, d, o);
  ASSERT_TRUE(pca.ok()) << pca.status().ToString();
  ASSERT_EQ(pca->n_components, 5);
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(pca->explained_variance[k], evals[k], 1e-3 * evals[k]) << k;
  EXPECT_LT(pca->explained_variance[3], 1e-6 * evals[0]);
  // The top-3 components span the true subspace: each basis row projects
  // onto them with norm 1.
  for (int64_t b = 0; b < r; ++b) {
    double norm2 = 0;
    for (int64_t k = 0; k < 3; ++k) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j)
        dot += double(basis[b * d + j]) * pca->components[k * d + j];
      norm2 += dot * dot;
    }
    EXPECT_NEAR(norm2, 1.0, 1e-4) << "basis vector " << b;
  }
  // transformed = (x - mean) components^T, and it reconstructs x.
  for (int64_t i = 0; i < n; i += 37) {
    for (int64_t k = 0; k < 3; ++k) {
      double p = 0;
      for (int64_t j = 0; j < d; ++j)
        p += (x[i * d + j] - pca->mean[j]) * double(pca->components[k * d + j]);
      EXPECT_NEAR(pca->transformed[i * 5 + k], p, 1e-3 * (1 + std::fabs(p)));
    }
    for (int64_t j = 0; j < d; ++j) {
      double rec = pca->mean[j];
      for (int64_t k = 0; k < 5; ++k)
        rec += pca->transformed[i * 5 + k] * double(pca->components[k * d + j]);
      EXPECT_NEAR(rec, x[i * d + j], 1e-3 * (1 + std::fabs(x[i * d + j])));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Solvers, LowRankPcaTest,
    ::testing::Values(PcaCase{PcaSolver::kBlockKrylov, 30},
                      PcaCase{PcaSolver::kBlockKrylov, 200},
                      PcaCase{PcaSolver::kPowerIteration, 200}),
    [](const ::testing::TestParamInfo<PcaCase>& info) {
      return std::string(info.param.solver == PcaSolver::kBlockKrylov
                             ? "Krylov"
                             : "Power") +
             std::to_string(info.param.d);
    });

// On a spectrum without a clear gap, block Krylov's default basis (a third
// of power iteration's passes here) keeps within 0.5% of the variance of a
// converged PCA (power iteration run 30 times instead of 7).
TEST(PcaTest, KrylovKeepsNearlyAllTheVarianceOfAConvergedPca) {
  const int64_t n = 3000, d = 400;
  std::mt19937_64 rng(8);
  std::vector<float> x(n * d);
  FillGaussian(rng, x.data(), n * d);
  // Column scales decaying slowly: no gap at 20 components.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j)
      x[i * d + j] *= static_cast<float>(1.0 / std::sqrt(1.0 + 0.05 * j));
  auto kept = [&](PcaSolver solver, int iter, int64_t width) {
    PcaOptions o;
    o.n_components = 20;
    o.seed = 3;
    o.solver = solver;
    o.n_iter = iter;
    auto p = RandomizedPca(x.data(), n, d, o);
    EXPECT_TRUE(p.ok());
    EXPECT_EQ(p->basis_width, width);
    double v = 0;
    for (double e : p->explained_variance) v += e;
    return v;
  };
  const double krylov = kept(PcaSolver::kBlockKrylov, -1, 80);
  const double power = kept(PcaSolver::kPowerIteration, -1, 30);
  const double converged = kept(PcaSolver::kPowerIteration, 30, 30);
  std::printf("variance kept: krylov %.5f, power(7) %.5f, power(30) %.5f\n",
              krylov, power, converged);
  EXPECT_GE(krylov, 0.995 * converged);
  EXPECT_GE(power, 0.995 * converged);
}

TEST(PcaTest, DeterministicForASeedWhateverTheThreads) {
  const Dataset d = testing::Blobs({200, 200, 100}, 40, 3.0, 3, 2);
  PcaOptions o;
  o.n_components = 6;
  o.seed = 9;
  o.threads = 1;
  auto a = RandomizedPca(d.features.data(), d.size(), 40, o);
  o.threads = 4;
  auto b = RandomizedPca(d.features.data(), d.size(), 40, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->transformed, b->transformed);
  EXPECT_EQ(a->components, b->components);
}

TEST(PcaTest, RejectsDegenerateInput) {
  std::vector<float> x(10, 1.0f);
  EXPECT_FALSE(RandomizedPca(x.data(), 1, 10, PcaOptions{}).ok());
  PcaOptions o;
  o.n_components = 0;
  EXPECT_FALSE(RandomizedPca(x.data(), 5, 2, o).ok());
}

TEST(KMeansTest, FindsWellSeparatedBlobs) {
  std::vector<int64_t> blob;
  const std::vector<int64_t> sizes = {150, 200, 120, 180, 160};
  const Dataset d = testing::Blobs(sizes, 10, 15.0, 5, 11, &blob);
  KMeansOptions o;
  o.k = 5;
  o.seed = 3;
  auto km = KMeans(d.features.data(), d.size(), 10, o);
  ASSERT_TRUE(km.ok()) << km.status().ToString();
  // Each cluster is exactly one blob and each blob one cluster.
  std::map<int32_t, std::set<int64_t>> blobs_of;
  std::map<int64_t, std::set<int32_t>> clusters_of;
  for (int64_t i = 0; i < d.size(); ++i) {
    blobs_of[km->labels[i]].insert(blob[i]);
    clusters_of[blob[i]].insert(km->labels[i]);
  }
  EXPECT_EQ(blobs_of.size(), 5u);
  for (const auto& [c, b] : blobs_of) EXPECT_EQ(b.size(), 1u) << c;
  for (const auto& [b, c] : clusters_of) EXPECT_EQ(c.size(), 1u) << b;
  // Inertia equals the within-blob sum of squares (noise variance 1 in 10
  // dimensions: about 10 per point).
  EXPECT_NEAR(km->inertia / d.size(), 10.0, 1.0);
  EXPECT_GE(km->n_iter, 1);
}

TEST(KMeansTest, MoreRestartsNeverWorse) {
  const Dataset d =
      testing::Blobs({100, 100, 100, 100, 100, 100}, 6, 1.5, 2, 4);
  KMeansOptions o;
  o.k = 6;
  o.seed = 21;
  o.n_init = 1;
  auto one = KMeans(d.features.data(), d.size(), 6, o);
  o.n_init = 6;
  auto six = KMeans(d.features.data(), d.size(), 6, o);
  ASSERT_TRUE(one.ok() && six.ok());
  // Restart 0 of the six is the single run, so the best can only be lower.
  EXPECT_LE(six->inertia, one->inertia);
}

TEST(KMeansTest, DeterministicWhateverTheThreads) {
  const Dataset d = testing::Blobs({3000, 2500, 4000}, 12, 2.0, 3, 6);
  KMeansOptions o;
  o.k = 7;
  o.seed = 2;
  std::vector<KMeansResult> r;
  for (int t : {1, 2, 5}) {
    o.threads = t;
    auto km = KMeans(d.features.data(), d.size(), 12, o);
    ASSERT_TRUE(km.ok());
    r.push_back(std::move(*km));
  }
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_EQ(r[i].labels, r[0].labels);
    EXPECT_EQ(r[i].centers, r[0].centers);
    EXPECT_EQ(r[i].inertia, r[0].inertia);
  }
}

TEST(KMeansTest, RejectsBadK) {
  std::vector<float> x(20, 0.5f);
  KMeansOptions o;
  o.k = 11;
  EXPECT_FALSE(KMeans(x.data(), 10, 2, o).ok());
  o.k = 0;
  EXPECT_FALSE(KMeans(x.data(), 10, 2, o).ok());
}

TEST(KMeansTest, IdenticalPointsDoNotBreakIt) {
  std::vector<float> x(40, 1.0f);  // 20 identical 2-d points
  KMeansOptions o;
  o.k = 3;
  auto km = KMeans(x.data(), 20, 2, o);
  ASSERT_TRUE(km.ok());
  EXPECT_EQ(km->inertia, 0.0);
  for (float c : km->centers) EXPECT_TRUE(std::isfinite(c));
}

}  // namespace
}  // namespace strata
