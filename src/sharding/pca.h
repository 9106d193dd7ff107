#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace strata {

// How the randomized PCA finds the subspace it then decomposes exactly.
enum class PcaSolver {
  // scikit-learn's randomized_svd: n_iter power iterations on a block of
  // n_components + oversamples columns (2 n_iter + 2 passes over the data).
  kPowerIteration,
  // Randomized block Krylov (Musco and Musco 2015): keeps every block of
  // the power sequence, so n_iter steps give an (n_iter + 1)-times wider
  // basis from 2 n_iter + 1 passes plus one wider final pass. With its
  // defaults it keeps more variance than the scikit-learn default of
  // kPowerIteration in about half the passes (bench/shard_bench.cc,
  // docs/design/sharding.md).
  kBlockKrylov,
};

// Randomized PCA (Halko, Martinsson and Tropp 2011): a Gaussian test matrix
// with n_components + oversamples columns, a range finder (power iteration
// as scikit-learn's PCA(svd_solver="randomized"), or block Krylov), then an
// exact SVD of the small projected matrix. The data are centred implicitly
// (the mean is folded into the products), so the input is never copied.
struct PcaOptions {
  int64_t n_components = 50;
  int64_t oversamples = 10;  // scikit-learn's n_oversamples
  // kBlockKrylov: columns per block; 0 = (n_components + oversamples) / 2
  // rounded up to a multiple of 8.
  int64_t block_size = 0;
  PcaSolver solver = PcaSolver::kBlockKrylov;
  // Power iterations (kPowerIteration; < 0 = scikit-learn's "auto": 7 when
  // n_components is below 10% of min(n, d), else 4) or Krylov steps
  // (kBlockKrylov; < 0 = 4, fewer when the basis would be wider than
  // min(n, d)).
  int n_iter = -1;
  uint64_t seed = 0;
  int threads = 0;  // for our own loops; 0 = hardware threads
};

struct PcaResult {
  int64_t n_components = 0;  // min(requested, n, d)
  int n_iter = 0;            // power iterations or Krylov steps run
  int64_t basis_width = 0;   // columns of the range finder's basis
  std::vector<float> mean;   // d
  // n_components x d, unit rows, by decreasing variance; each row's
  // largest-magnitude entry is positive (a deterministic sign).
  std::vector<float> components;
  std::vector<double> explained_variance;  // n_components, divisor n - 1
  std::vector<float> transformed;  // n x n_components: (x - mean) projected
};

// PCA of the row-major n x d float matrix `x`. Deterministic for a seed
// whatever options.threads is. Thread-safe (no shared state); `x` must not
// change during the call. InvalidArgument when n < 2, d < 1 or
// n_components < 1.
Result<PcaResult> RandomizedPca(const float* x, int64_t n, int64_t d,
                                const PcaOptions& options);

}  // namespace strata
