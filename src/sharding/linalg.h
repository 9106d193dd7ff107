#pragma once

// Small numerical toolkit for the sharding algorithms: row-major GEMM and
// column orthonormalisation through CBLAS (OpenBLAS), a symmetric
// eigensolver for small matrices, deterministic parallel loops, and a
// portable random stream. Internal to src/sharding; no LibTorch.
//
// Determinism: ParallelChunks cuts [0, n) into chunks whose boundaries depend
// only on n and the chunk size, never on the thread count, so code that
// writes one result per chunk and combines them in chunk order gives the
// same bits whatever the number of threads. The BLAS calls are whole-matrix
// calls; OpenBLAS splits a GEMM's output among its threads but not its inner
// dimension, so every output element is summed in the same order.
//
// Thread-safety: every function is thread-safe (no shared state).

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace strata {

// `threads` <= 0 means the number of hardware threads (at least 1).
int ResolveThreads(int threads);

// Calls fn(chunk, begin, end) for every chunk [begin, end) of [0, n), where
// chunk c covers [c * chunk_size, min(n, (c + 1) * chunk_size)). Chunks run
// on up to `threads` threads; returns when all are done. fn must not throw.
void ParallelChunks(int64_t n, int64_t chunk_size, int threads,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn);

// Number of chunks ParallelChunks makes for (n, chunk_size).
inline int64_t NumChunks(int64_t n, int64_t chunk_size) {
  return n <= 0 ? 0 : (n + chunk_size - 1) / chunk_size;
}

// C (m x n) = alpha * op(A) * op(B) + beta * C, all row-major float32, where
// op(A) is m x k and op(B) is k x n. lda/ldb/ldc are the row strides of the
// matrices as stored.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc);

// Replaces the columns of the row-major n x l matrix `y` by an orthonormal
// basis of their span (shifted Cholesky-QR, then `refinements` more plain
// Cholesky-QR passes, all in double precision). Columns that are
// numerically dependent come out small rather than as NaN; an all-zero
// matrix is left as is. Costs O(n l^2).
void OrthonormalizeColumns(float* y, int64_t n, int64_t l, int refinements);

// Eigen-decomposition of the symmetric n x n matrix `a` (row-major, double)
// by cyclic Jacobi rotations: eigenvalues in descending order in *values,
// the matching unit eigenvectors as the *columns* of *vectors (row-major
// n x n). For the small matrices of a randomized SVD (n <= a few hundred).
void SymmetricEigen(std::vector<double> a, int64_t n,
                    std::vector<double>* values, std::vector<double>* vectors);

// Derives an independent 64-bit seed for `stream` from `seed` (SplitMix64
// finaliser), so per-class, per-init or per-epoch streams do not overlap.
uint64_t MixSeed(uint64_t seed, uint64_t stream);

// Uniform double in [0, 1) from 53 random bits: the same on every platform
// (std::uniform_real_distribution is implementation-defined).
inline double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform integer in [0, n) (n > 0), platform-independent.
inline uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n) {
  return rng() % n;
}

// Standard normal draws by Box-Muller (platform-independent).
void FillGaussian(std::mt19937_64& rng, float* out, int64_t n);

// Fisher-Yates with raw draws (std::shuffle's algorithm differs between
// standard libraries and the order must not).
template <typename T>
void PortableShuffle(std::vector<T>* v, std::mt19937_64& rng) {
  for (size_t i = v->size(); i > 1; --i) {
    size_t j = static_cast<size_t>(UniformIndex(rng, i));
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

}  // namespace strata
