#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace strata {

// Lloyd's KMeans with greedy k-means++ initialisation, following
// scikit-learn's KMeans(algorithm="lloyd"): 2 + ln(k) candidate centres per
// step of the initialisation, convergence when the labels stop changing or
// the total squared centre shift falls to tol x (mean per-feature variance),
// empty clusters re-seeded with the points farthest from their centres, a
// final assignment to the final centres, and the best of n_init runs by
// inertia. Point-to-centre distances use ||x||^2 - 2 x.c + ||c||^2; each
// Lloyd iteration is one fused pass (distances, labels, new sums).
struct KMeansOptions {
  int64_t k = 8;
  int max_iter = 150;
  double tol = 1e-4;
  int n_init = 1;
  uint64_t seed = 0;
  int threads = 0;  // 0 = hardware threads
};

struct KMeansResult {
  int64_t k = 0;
  std::vector<float> centers;   // k x d
  std::vector<int32_t> labels;  // n, in [0, k)
  double inertia = 0;           // sum of squared distances to own centre
  int n_iter = 0;               // Lloyd iterations of the chosen run
};

// Clusters the row-major n x d float matrix `x`. Deterministic for a seed
// whatever options.threads is. Thread-safe (no shared state). InvalidArgument
// when k < 1, k > n, d < 1, max_iter < 1 or n_init < 1.
Result<KMeansResult> KMeans(const float* x, int64_t n, int64_t d,
                            const KMeansOptions& options);

}  // namespace strata
