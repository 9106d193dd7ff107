#include "sharding/pca.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "sharding/linalg.h"

namespace strata {
namespace {

constexpr int64_t kRowChunk = 1024;

// Column means of x in double, combined over fixed row chunks in order.
std::vector<double> ColumnMeans(const float* x, int64_t n, int64_t d,
                                int threads) {
  const int64_t chunks = NumChunks(n, kRowChunk);
  std::vector<double> partial(static_cast<size_t>(chunks * d), 0.0);
  ParallelChunks(n, kRowChunk, threads, [&](int64_t c, int64_t b, int64_t e) {
    double* acc = partial.data() + c * d;
    for (int64_t i = b; i < e; ++i) {
      const float* row = x + i * d;
      for (int64_t j = 0; j < d; ++j) acc[j] += row[j];
    }
  });
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < d; ++j) mean[j] += partial[c * d + j];
  for (double& m : mean) m /= static_cast<double>(n);
  return mean;
}

// Column sums of the row-major n x l matrix y, in double.
std::vector<double> ColumnSums(const float* y, int64_t n, int64_t l) {
  std::vector<double> s(static_cast<size_t>(l), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < l; ++j) s[j] += y[i * l + j];
  return s;
}

// The products with the centred matrix Xc = X - 1 mean^T, without forming it.
class CenteredMatrix {
 public:
  CenteredMatrix(const float* x, int64_t n, int64_t d,
                 const std::vector<float>& mean)
      : x_(x), n_(n), d_(d), mean_(mean) {}

  // y (n x l) = Xc * w (d x l).
  void Times(const float* w, int64_t l, float* y) const {
    Sgemm(false, false, n_, l, d_, 1.0f, x_, d_, w, l, 0.0f, y, l);
    std::vector<double> mw(static_cast<size_t>(l), 0.0);  // mean^T w
    for (int64_t j = 0; j < d_; ++j)
      for (int64_t c = 0; c < l; ++c) mw[c] += mean_[j] * w[j * l + c];
    for (int64_t i = 0; i < n_; ++i)
      for (int64_t c = 0; c < l; ++c) y[i * l + c] -= static_cast<float>(mw[c]);
  }

  // w (d x l) = Xc^T * y (n x l).
  void TransposeTimes(const float* y, int64_t l, float* w) const {
    Sgemm(true, false, d_, l, n_, 1.0f, x_, d_, y, l, 0.0f, w, l);
    const std::vector<double> sy = ColumnSums(y, n_, l);  // 1^T y
    for (int64_t j = 0; j < d_; ++j)
      for (int64_t c = 0; c < l; ++c)
        w[j * l + c] -= static_cast<float>(mean_[j] * sy[c]);
  }

 private:
  const float* x_;
  const int64_t n_, d_;
  const std::vector<float>& mean_;
};

}  // namespace

Result<PcaResult> RandomizedPca(const float* x, int64_t n, int64_t d,
                                const PcaOptions& options) {
  if (n < 2 || d < 1) {
    return Status::InvalidArgument(
        "PCA needs at least 2 examples of dimension >= 1 (got {} x {})", n, d);
  }
  if (options.n_components < 1) {
    return Status::InvalidArgument("PCA n_components must be >= 1, got {}",
                                   options.n_components);
  }
  const int threads = options.threads;
  const int64_t k = std::min({options.n_components, n, d});
  const int64_t l =
      std::min(k + std::max<int64_t>(options.oversamples, 0), std::min(n, d));
  int n_iter = options.n_iter;
  if (n_iter < 0)
    n_iter = k < 0.1 * static_cast<double>(std::min(n, d)) ? 7 : 4;

  PcaResult result;
  result.n_components = k;
  result.n_iter = n_iter;
  const std::vector<double> mean_d = ColumnMeans(x, n, d, threads);
  result.mean.assign(mean_d.begin(), mean_d.end());
  const CenteredMatrix xc(x, n, d, result.mean);

  // Range finder: Q spans the top-l left singular space of Xc.
  std::vector<float> omega(static_cast<size_t>(d * l));
  std::mt19937_64 rng(MixSeed(options.seed, 0x9ca));
  FillGaussian(rng, omega.data(), d * l);
  std::vector<float> y(static_cast<size_t>(n * l));
  for (int it = 0; it < n_iter; ++it) {
    xc.Times(omega.data(), l, y.data());
    OrthonormalizeColumns(y.data(), n, l, 1);
    xc.TransposeTimes(y.data(), l, omega.data());
    OrthonormalizeColumns(omega.data(), d, l, 1);
  }
  xc.Times(omega.data(), l, y.data());
  OrthonormalizeColumns(y.data(), n, l, 2);  // y is now Q

  // B = Q^T Xc (l x d), then the SVD of B from the eigenpairs of B B^T.
  std::vector<float> b(static_cast<size_t>(l * d));
  Sgemm(true, false, l, d, n, 1.0f, y.data(), l, x, d, 0.0f, b.data(), d);
  const std::vector<double> q1 = ColumnSums(y.data(), n, l);  // Q^T 1
  for (int64_t c = 0; c < l; ++c)
    for (int64_t j = 0; j < d; ++j)
      b[c * d + j] -= static_cast<float>(q1[c] * result.mean[j]);
  std::vector<double> bbt(static_cast<size_t>(l * l), 0.0);
  ParallelChunks(l, 1, threads, [&](int64_t, int64_t r, int64_t) {
    for (int64_t s = r; s < l; ++s) {
      double acc = 0;
      const float* br = b.data() + r * d;
      const float* bs = b.data() + s * d;
      for (int64_t j = 0; j < d; ++j)
        acc += static_cast<double>(br[j]) * static_cast<double>(bs[j]);
      bbt[r * l + s] = acc;
      bbt[s * l + r] = acc;
    }
  });
  std::vector<double> evals, evecs;  // evecs columns = left vectors of B
  SymmetricEigen(std::move(bbt), l, &evals, &evecs);

  // Components: v_c = B^T u_c / s_c, signed so the largest entry is > 0.
  result.components.assign(static_cast<size_t>(k * d), 0.0f);
  result.explained_variance.assign(static_cast<size_t>(k), 0.0);
  std::vector<double> sing(static_cast<size_t>(k), 0.0);
  std::vector<double> sign(static_cast<size_t>(k), 1.0);
  for (int64_t c = 0; c < k; ++c) {
    const double s = std::sqrt(std::max(evals[c], 0.0));
    sing[c] = s;
    result.explained_variance[c] = s * s / static_cast<double>(n - 1);
    std::vector<double> v(static_cast<size_t>(d), 0.0);
    for (int64_t r = 0; r < l; ++r) {
      const double u = evecs[r * l + c];
      const float* br = b.data() + r * d;
      for (int64_t j = 0; j < d; ++j) v[j] += u * br[j];
    }
    int64_t arg = 0;
    for (int64_t j = 1; j < d; ++j)
      if (std::fabs(v[j]) > std::fabs(v[arg])) arg = j;
    sign[c] = v[arg] < 0 ? -1.0 : 1.0;
    const double scale = s > 0 ? sign[c] / s : 0.0;
    for (int64_t j = 0; j < d; ++j)
      result.components[c * d + j] = static_cast<float>(v[j] * scale);
  }

  // Projections: Xc V^T = Q U S (as scikit-learn's fit_transform), an
  // n x l x k product instead of another pass over the n x d data.
  std::vector<float> us(static_cast<size_t>(l * k));
  for (int64_t r = 0; r < l; ++r)
    for (int64_t c = 0; c < k; ++c)
      us[r * k + c] = static_cast<float>(evecs[r * l + c] * sing[c] * sign[c]);
  result.transformed.assign(static_cast<size_t>(n * k), 0.0f);
  Sgemm(false, false, n, k, l, 1.0f, y.data(), l, us.data(), k, 0.0f,
        result.transformed.data(), k);
  return result;
}

}  // namespace strata
