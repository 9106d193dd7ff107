#include "sharding/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "sharding/linalg.h"

namespace strata {
namespace {

constexpr int64_t kRowChunk = 2048;

// The two hot loops get an AVX2 clone picked at load time (GCC function
// multi-versioning); both clones do the same operations in the same order
// (no FMA: ISO C++ mode does not contract), so results are bit-identical
// whichever runs.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define STRATA_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STRATA_VECTOR_CLONES
#endif

// Eight interleaved partial sums, so the loop vectorises without changing
// the (fixed) summation order.
STRATA_VECTOR_CLONES
double SquaredDistance(const float* a, const float* b, int64_t d) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    for (int t = 0; t < 8; ++t) {
      const double u = static_cast<double>(a[j + t]) - b[j + t];
      s[t] += u * u;
    }
  }
  double tail = 0;
  for (; j < d; ++j) {
    const double u = static_cast<double>(a[j]) - b[j];
    tail += u * u;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) +
         tail;
}

// For rows [0, rows) of x: the nearest centre by ||c||^2 - 2 x.c (centres
// transposed in ct, d x k) and that score. acc has room for k floats.
STRATA_VECTOR_CLONES
void NearestCenters(const float* x, int64_t rows, int64_t d, const float* ct,
                    const float* csq, int64_t k, float* acc, int32_t* label,
                    float* score) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * d;
    for (int64_t c = 0; c < k; ++c) acc[c] = 0.0f;
    for (int64_t j = 0; j < d; ++j) {
      const float xj = row[j];
      const float* cj = ct + j * k;
      for (int64_t c = 0; c < k; ++c) acc[c] += xj * cj[c];
    }
    int32_t best = 0;
    float best_d = std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < k; ++c) {
      const float v = csq[c] - 2.0f * acc[c];
      if (v < best_d) best_d = v, best = static_cast<int32_t>(c);
    }
    label[i] = best;
    score[i] = best_d;
  }
}

// The data, centred (KMeans is translation invariant; centring keeps the
// GEMM form of the distances accurate), with squared row norms.
struct Points {
  const float* x;
  int64_t n, d;
  std::vector<float> sq;  // ||x_i||^2
  int threads;
};

// Greedy k-means++ (Arthur and Vassilvitskii 2007, scikit-learn's variant).
std::vector<float> KMeansPlusPlus(const Points& p, int64_t k,
                                  std::mt19937_64& rng) {
  const int64_t n = p.n, d = p.d;
  const int trials = 2 + static_cast<int>(std::log(static_cast<double>(k)));
  std::vector<float> centers(static_cast<size_t>(k * d));
  const int64_t first = static_cast<int64_t>(UniformIndex(rng, n));
  std::copy(p.x + first * d, p.x + (first + 1) * d, centers.begin());
  std::vector<double> closest(static_cast<size_t>(n));
  ParallelChunks(n, kRowChunk, p.threads, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      closest[i] = SquaredDistance(p.x + i * d, centers.data(), d);
  });
  std::vector<double> cumsum(static_cast<size_t>(n));
  const int64_t chunks = NumChunks(n, kRowChunk);
  std::vector<double> partial(static_cast<size_t>(chunks * trials));
  std::vector<double> cand_dist(static_cast<size_t>(trials * n));
  std::vector<int64_t> cand(static_cast<size_t>(trials));
  for (int64_t c = 1; c < k; ++c) {
    std::partial_sum(closest.begin(), closest.end(), cumsum.begin());
    const double pot = cumsum.back();
    for (int t = 0; t < trials; ++t) {
      const double r = UniformDouble(rng) * pot;
      int64_t id =
          std::upper_bound(cumsum.begin(), cumsum.end(), r) - cumsum.begin();
      cand[t] = std::min(id, n - 1);
    }
    ParallelChunks(
        n, kRowChunk, p.threads, [&](int64_t ch, int64_t b, int64_t e) {
          for (int t = 0; t < trials; ++t) {
            const float* cx = p.x + cand[t] * d;
            double sum = 0;
            for (int64_t i = b; i < e; ++i) {
              const double v =
                  std::min(closest[i], SquaredDistance(p.x + i * d, cx, d));
              cand_dist[t * n + i] = v;
              sum += v;
            }
            partial[ch * trials + t] = sum;
          }
        });
    int best = 0;
    double best_pot = std::numeric_limits<double>::infinity();
    for (int t = 0; t < trials; ++t) {
      double s = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) s += partial[ch * trials + t];
      if (s < best_pot) best_pot = s, best = t;
    }
    std::copy(cand_dist.begin() + best * n, cand_dist.begin() + (best + 1) * n,
              closest.begin());
    std::copy(p.x + cand[best] * d, p.x + (cand[best] + 1) * d,
              centers.begin() + c * d);
  }
  return centers;
}

// One Lloyd pass over the points, fused as in scikit-learn's lloyd: each
// point's nearest centre by ||c||^2 - 2 x.c (+ ||x||^2, the same for every
// centre), its squared distance, and its coordinates added to its new
// cluster's sum. The x.c products go over the centres for each coordinate
// (centres stored transposed), a loop the compiler vectorises; with k and
// d in the tens a BLAS call per chunk would cost more than it saves.
// Sums are per fixed chunk, combined in chunk order (thread-independent).
struct LloydPass {
  int64_t changed = 0;
  std::vector<double> sums;     // k x d
  std::vector<int64_t> counts;  // k
};

LloydPass Assign(const Points& p, const std::vector<float>& centers, int64_t k,
                 bool with_sums, std::vector<int32_t>* labels,
                 std::vector<float>* dist) {
  const int64_t n = p.n, d = p.d;
  std::vector<float> ct(static_cast<size_t>(d * k)),
      csq(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j) {
      const float v = centers[c * d + j];
      ct[j * k + c] = v;
      s += static_cast<double>(v) * v;
    }
    csq[c] = static_cast<float>(s);
  }
  const int64_t chunks = NumChunks(n, kRowChunk);
  std::vector<int64_t> changed(static_cast<size_t>(chunks), 0);
  std::vector<double> sums(with_sums ? static_cast<size_t>(chunks * k * d) : 0);
  std::vector<int64_t> counts(with_sums ? static_cast<size_t>(chunks * k) : 0);
  ParallelChunks(n, kRowChunk, p.threads,
                 [&](int64_t ch, int64_t b, int64_t e) {
                   std::vector<float> acc(static_cast<size_t>(k)), score(e - b);
                   std::vector<int32_t> best(e - b);
                   NearestCenters(p.x + b * d, e - b, d, ct.data(), csq.data(),
                                  k, acc.data(), best.data(), score.data());
                   double* s = with_sums ? sums.data() + ch * k * d : nullptr;
                   int64_t* cnt = with_sums ? counts.data() + ch * k : nullptr;
                   for (int64_t i = b; i < e; ++i) {
                     const int32_t c = best[i - b];
                     if ((*labels)[i] != c) ++changed[ch];
                     (*labels)[i] = c;
                     (*dist)[i] = std::max(0.0f, score[i - b] + p.sq[i]);
                     if (with_sums) {
                       ++cnt[c];
                       const float* row = p.x + i * d;
                       double* sc = s + c * d;
                       for (int64_t j = 0; j < d; ++j) sc[j] += row[j];
                     }
                   }
                 });
  LloydPass out;
  out.changed = std::accumulate(changed.begin(), changed.end(), int64_t{0});
  if (with_sums) {
    out.sums.assign(static_cast<size_t>(k * d), 0.0);
    out.counts.assign(static_cast<size_t>(k), 0);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      for (int64_t i = 0; i < k * d; ++i) out.sums[i] += sums[ch * k * d + i];
      for (int64_t c = 0; c < k; ++c) out.counts[c] += counts[ch * k + c];
    }
  }
  return out;
}

// New centres as the means of their points. Empty clusters take the
// farthest points (from their current centres), which leave their clusters.
void UpdateCenters(const Points& p, int64_t k,
                   const std::vector<int32_t>& labels,
                   const std::vector<float>& dist, LloydPass pass,
                   std::vector<float>* centers) {
  const int64_t n = p.n, d = p.d;
  std::vector<double>& total = pass.sums;
  std::vector<int64_t>& count = pass.counts;
  std::vector<int64_t> empty;
  for (int64_t c = 0; c < k; ++c)
    if (count[c] == 0) empty.push_back(c);
  if (!empty.empty()) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + empty.size(), order.end(),
                      [&](int64_t a, int64_t b) {
                        return dist[a] != dist[b] ? dist[a] > dist[b] : a < b;
                      });
    for (size_t e = 0; e < empty.size(); ++e) {
      const int64_t i = order[e], from = labels[i], to = empty[e];
      if (count[from] <= 1) continue;
      const float* row = p.x + i * d;
      for (int64_t j = 0; j < d; ++j) {
        total[from * d + j] -= row[j];
        total[to * d + j] = row[j];
      }
      --count[from];
      count[to] = 1;
    }
  }
  for (int64_t c = 0; c < k; ++c) {
    if (count[c] == 0) continue;  // keep the old centre
    for (int64_t j = 0; j < d; ++j)
      (*centers)[c * d + j] =
          static_cast<float>(total[c * d + j] / static_cast<double>(count[c]));
  }
}

KMeansResult RunOnce(const Points& p, const KMeansOptions& o, double tol_abs,
                     uint64_t seed) {
  const int64_t n = p.n, d = p.d, k = o.k;
  std::mt19937_64 rng(seed);
  KMeansResult r;
  r.k = k;
  r.centers = KMeansPlusPlus(p, k, rng);
  r.labels.assign(static_cast<size_t>(n), -1);
  std::vector<float> dist(static_cast<size_t>(n));
  bool strict = false;
  std::vector<float> old;
  for (int it = 0; it < o.max_iter; ++it) {
    LloydPass pass = Assign(p, r.centers, k, true, &r.labels, &dist);
    r.n_iter = it + 1;
    if (it > 0 && pass.changed == 0) {
      strict = true;  // labels stable: centres already are their means
      break;
    }
    old = r.centers;
    UpdateCenters(p, k, r.labels, dist, std::move(pass), &r.centers);
    double shift = 0;
    for (int64_t i = 0; i < k * d; ++i) {
      const double t = static_cast<double>(r.centers[i]) - old[i];
      shift += t * t;
    }
    if (shift <= tol_abs) break;
  }
  // Labels that match the final centres (scikit-learn does the same).
  if (!strict) Assign(p, r.centers, k, false, &r.labels, &dist);
  // Inertia directly, in double (the GEMM form is only for choosing).
  const int64_t chunks = NumChunks(n, kRowChunk);
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  ParallelChunks(n, kRowChunk, p.threads,
                 [&](int64_t ch, int64_t b, int64_t e) {
                   double s = 0;
                   for (int64_t i = b; i < e; ++i)
                     s += SquaredDistance(
                         p.x + i * d, r.centers.data() + r.labels[i] * d, d);
                   partial[ch] = s;
                 });
  r.inertia = std::accumulate(partial.begin(), partial.end(), 0.0);
  return r;
}

}  // namespace

Result<KMeansResult> KMeans(const float* x, int64_t n, int64_t d,
                            const KMeansOptions& options) {
  if (options.k < 1 || options.k > n) {
    return Status::InvalidArgument(
        "KMeans needs 1 <= k <= number of points (k = {}, points = {})",
        options.k, n);
  }
  if (d < 1) return Status::InvalidArgument("KMeans: dimension must be >= 1");
  if (options.max_iter < 1 || options.n_init < 1) {
    return Status::InvalidArgument(
        "KMeans: max_iter ({}) and n_init ({}) must be >= 1", options.max_iter,
        options.n_init);
  }
  const int threads = ResolveThreads(options.threads);
  // Centre the data; the mean per-feature variance scales the tolerance.
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mean[j] += x[i * d + j];
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<float> xc(static_cast<size_t>(n * d));
  std::vector<double> var(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const double t = x[i * d + j] - mean[j];
      xc[i * d + j] = static_cast<float>(t);
      var[j] += t * t;
    }
  }
  double mean_var = 0;
  for (double v : var) mean_var += v / static_cast<double>(n);
  mean_var /= static_cast<double>(d);
  const double tol_abs = options.tol * mean_var;

  Points p{xc.data(), n, d, {}, threads};
  p.sq.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < d; ++j)
      s += static_cast<double>(xc[i * d + j]) * xc[i * d + j];
    p.sq[i] = static_cast<float>(s);
  }
  KMeansResult best;
  for (int init = 0; init < options.n_init; ++init) {
    KMeansResult r =
        RunOnce(p, options, tol_abs,
                MixSeed(options.seed, static_cast<uint64_t>(init)));
    if (init == 0 || r.inertia < best.inertia) best = std::move(r);
  }
  for (int64_t c = 0; c < best.k; ++c)
    for (int64_t j = 0; j < d; ++j)
      best.centers[c * d + j] += static_cast<float>(mean[j]);
  return best;
}

}  // namespace strata
