#include "sharding/linalg.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <thread>

#include "common/status.h"

namespace strata {

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void ParallelChunks(int64_t n, int64_t chunk_size, int threads,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  STRATA_CHECK(chunk_size > 0);
  const int64_t chunks = NumChunks(n, chunk_size);
  if (chunks == 0) return;
  const int t =
      static_cast<int>(std::min<int64_t>(ResolveThreads(threads), chunks));
  std::atomic<int64_t> next{0};
  auto body = [&] {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      const int64_t begin = c * chunk_size;
      fn(c, begin, std::min(n, begin + chunk_size));
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(t - 1));
  for (int i = 1; i < t; ++i) pool.emplace_back(body);
  body();
  for (auto& th : pool) th.join();
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

namespace {

// One Cholesky-QR pass on the double matrix y (n x l): G = Y^T Y + shift I,
// G = R^T R, Y <- Y R^-1. Returns false when G is zero (nothing to do).
bool CholeskyQrPass(std::vector<double>* y, int64_t n, int64_t l,
                    bool shifted) {
  std::vector<double> g(static_cast<size_t>(l * l), 0.0);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(l),
              static_cast<int>(n), 1.0, y->data(), static_cast<int>(l), 0.0,
              g.data(), static_cast<int>(l));
  double trace = 0;
  for (int64_t i = 0; i < l; ++i) trace += g[i * l + i];
  if (!(trace > 0)) return false;
  // Shifted Cholesky-QR (Fukaya et al. 2020): the shift keeps the
  // factorisation defined however ill-conditioned Y is; the plain passes
  // that follow restore orthogonality.
  const double eps = 1.1102230246251565e-16;
  double shift =
      shifted ? 11.0 * static_cast<double>(n * l + l * (l + 1)) * eps * trace
              : 0.0;
  // Upper Cholesky in place: g = R^T R.
  const double floor = 1e-300 + eps * eps * trace;
  for (int64_t j = 0; j < l; ++j) {
    double d = g[j * l + j] + shift;
    for (int64_t p = 0; p < j; ++p) d -= g[p * l + j] * g[p * l + j];
    // A non-positive pivot means this column depends on the previous ones
    // to working precision: keep it tiny instead of failing.
    const double r = std::sqrt(std::max(d, floor));
    g[j * l + j] = r;
    for (int64_t i = j + 1; i < l; ++i) {
      double s = g[j * l + i];
      for (int64_t p = 0; p < j; ++p) s -= g[p * l + j] * g[p * l + i];
      g[j * l + i] = s / r;
    }
    for (int64_t i = 0; i < j; ++i) g[j * l + i] = 0.0;
  }
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit,
              static_cast<int>(n), static_cast<int>(l), 1.0, g.data(),
              static_cast<int>(l), y->data(), static_cast<int>(l));
  return true;
}

}  // namespace

void OrthonormalizeColumns(float* y, int64_t n, int64_t l, int refinements) {
  if (n == 0 || l == 0) return;
  std::vector<double> yd(y, y + n * l);
  if (!CholeskyQrPass(&yd, n, l, /*shifted=*/true)) return;
  for (int r = 0; r < refinements; ++r) CholeskyQrPass(&yd, n, l, false);
  for (int64_t i = 0; i < n * l; ++i) y[i] = static_cast<float>(yd[i]);
}

void SymmetricEigen(std::vector<double> a, int64_t n,
                    std::vector<double>* values, std::vector<double>* vectors) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int64_t i = 0; i < n; ++i) {
      diag += a[i * n + i] * a[i * n + i];
      for (int64_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    }
    // Converged when the off-diagonal mass is at rounding level.
    if (off <= 1e-26 * diag || off == 0) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        // Skip rotations that cannot change the diagonal in double.
        if (std::fabs(apq) <=
            1e-18 * (std::fabs(a[p * n + p]) + std::fabs(a[q * n + q])))
          continue;
        const double app = a[p * n + p], aqq = a[q * n + q];
        const double theta = (aqq - app) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) /
                         (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return a[x * n + x] > a[y * n + y];
  });
  values->assign(static_cast<size_t>(n), 0.0);
  vectors->assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    (*values)[j] = a[order[j] * n + order[j]];
    for (int64_t k = 0; k < n; ++k) (*vectors)[k * n + j] = v[k * n + order[j]];
  }
}

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ULL * (stream + 1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void FillGaussian(std::mt19937_64& rng, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = UniformDouble(rng);
    const double u2 = UniformDouble(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(6.283185307179586 * u2));
    if (i + 1 < n)
      out[i + 1] = static_cast<float>(r * std::sin(6.283185307179586 * u2));
  }
}

}  // namespace strata
