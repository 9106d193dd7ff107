#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace strata {

// Randomized PCA (Halko, Martinsson and Tropp 2011), the algorithm of
// scikit-learn's PCA(svd_solver="randomized"): a Gaussian test matrix with
// n_components + oversamples columns, `n_iter` power iterations with the
// basis re-orthonormalised after every product, then an exact SVD of the
// small projected matrix. The data are centred implicitly (the mean is
// folded into the products), so the input is never copied.
struct PcaOptions {
  int64_t n_components = 50;
  int64_t oversamples = 10;  // scikit-learn's n_oversamples
  // Power iterations; < 0 = scikit-learn's "auto": 7 when n_components is
  // below 10% of min(n, d), else 4.
  int n_iter = -1;
  uint64_t seed = 0;
  int threads = 0;  // for our own loops; 0 = hardware threads
};

struct PcaResult {
  int64_t n_components = 0;  // min(requested, n, d)
  int n_iter = 0;            // power iterations actually run
  std::vector<float> mean;   // d
  // n_components x d, unit rows, by decreasing variance; each row's
  // largest-magnitude entry is positive (a deterministic sign).
  std::vector<float> components;
  std::vector<double> explained_variance;  // n_components, divisor n - 1
  std::vector<float> transformed;  // n x n_components: (x - mean) projected
};

// PCA of the row-major n x d float matrix `x`. Deterministic for a seed
// whatever options.threads is. InvalidArgument when n < 2, d < 1 or
// n_components < 1.
Result<PcaResult> RandomizedPca(const float* x, int64_t n, int64_t d,
                                const PcaOptions& options);

}  // namespace strata
