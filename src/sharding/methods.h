#pragma once

// Sharding: which worker trains on which example. Every method is a pure
// function of its inputs and seed (the same plan whatever the thread count),
// and every example ends up either with exactly one worker or, for the
// sparse clusters of the distribution-aware method, with all of them.
//
// Methods (docs/design/sharding.md):
//   random              each example to a seeded-random worker among those
//                       with the fewest examples so far (balanced counts)
//   mod                 example i to worker i mod n (tf.data's shard)
//   stratified          per class, a seeded shuffle, then round robin; the
//                       round robin continues from class to class, so class
//                       counts and totals differ by at most one between
//                       workers (paper 001, Fig. 4)
//   distribution-aware  flatten, randomized PCA, KMeans; clusters with at
//                       least n points go round robin like classes, clusters
//                       with fewer are broadcast to every worker (paper 001,
//                       Fig. 6)
//   class-clusters      KMeans into m sub-clusters within each class (in the
//                       PCA space), then stratified over (class, sub-cluster)
//                       (paper 000's proof of concept, m = 2)
//
// Thread-safety: every function is thread-safe (no shared state).

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "sharding/pca.h"

namespace strata {

enum class ShardMethod {
  kRandom,
  kMod,
  kStratified,
  kDistributionAware,
  kClassClusters
};

// "krylov" or "power"; ParsePcaSolver is InvalidArgument for other text.
const char* PcaSolverName(PcaSolver solver);
Result<PcaSolver> ParsePcaSolver(const std::string& name);

// "random", "mod", "stratified", "distribution-aware", "class-clusters".
const char* ShardMethodName(ShardMethod method);
// InvalidArgument naming the text and the choices for an unknown name.
Result<ShardMethod> ParseShardMethod(const std::string& name);
// True for the methods that run PCA and KMeans.
bool UsesClustering(ShardMethod method);

struct ShardOptions {
  ShardMethod method = ShardMethod::kMod;
  int num_workers = 1;
  uint64_t seed = 1;
  // distribution-aware and class-clusters
  int64_t pca_components = 50;  // PCA dimension (clipped to the data's)
  PcaSolver pca_solver = PcaSolver::kBlockKrylov;
  int pca_iter = -1;        // power iterations / Krylov steps; < 0 = auto
  int64_t clusters = 0;     // distribution-aware k; 0 = 2 x classes
  int max_iter = 150;       // KMeans
  double tol = 1e-4;        // KMeans, relative to the mean variance
  int n_init = 1;           // KMeans restarts (best inertia kept)
  int64_t subclusters = 2;  // class-clusters: m per class
  int threads = 0;          // 0 = hardware threads; never changes results
  // Hash the dataset into ShardPlan::fingerprint (needed to save the plan
  // and check it against a dataset later; a plan computed at the start of
  // a run and used at once skips it: about 0.4 s for MNIST).
  bool fingerprint = true;
};

// Wall time of each phase, seconds. `load` is filled by whoever loaded the
// dataset (the CLI, ResolveShards); `fingerprint` is the dataset hash.
struct ShardTimings {
  double load = 0;
  double fingerprint = 0;
  double pca = 0;
  double kmeans = 0;
  double assign = 0;
  double total = 0;  // everything above
};

// The result of sharding one dataset for n workers.
struct ShardPlan {
  ShardOptions options;
  std::string dataset_name;
  std::string fingerprint;  // DatasetFingerprint() of the dataset
  int64_t num_examples = 0;
  int64_t num_classes = 0;
  // Each worker's own examples, ascending; broadcast ones are not repeated
  // here (see WorkerShard).
  std::vector<std::vector<int64_t>> workers;
  std::vector<int64_t> broadcast;  // ascending; in every worker's shard
  // Per-example cluster id (distribution-aware: the KMeans cluster;
  // class-clusters: class * subclusters + sub-cluster), or empty.
  std::vector<int32_t> cluster_ids;
  int64_t num_clusters = 0;  // 0 when cluster_ids is empty
  // Variance the PCA kept (sum of its explained variances), the KMeans sum
  // of squared distances in the PCA space (class-clusters: summed over
  // classes) and Lloyd iterations (class-clusters: the most of any class);
  // 0 without clustering.
  double pca_variance = 0;
  double kmeans_inertia = 0;
  int kmeans_iterations = 0;
  ShardTimings timings;

  // Worker w's full shard: its own examples and the broadcast set,
  // ascending. w must be in [0, workers.size()) (checked).
  std::vector<int64_t> WorkerShard(int w) const;
};

// The building blocks, exposed for tests and benchmarks. Each returns one
// worker id per example (kBroadcast = every worker).
constexpr int32_t kBroadcast = -1;

// Balanced random: rounds of n examples each get a fresh permutation of the
// workers, which is exactly "a uniformly random worker among those with the
// fewest examples so far".
std::vector<int32_t> AssignRandom(int64_t num_examples, int num_workers,
                                  uint64_t seed);
std::vector<int32_t> AssignMod(int64_t num_examples, int num_workers);
// Round robin within groups (classes, clusters) in group order, each group
// shuffled with its own seeded stream first; the worker offset carries over
// from one group to the next. With `broadcast_below` > 0, groups with fewer
// members than that are broadcast instead. Group ids must be in
// [0, num_groups).
std::vector<int32_t> AssignGroupsRoundRobin(const std::vector<int64_t>& groups,
                                            int64_t num_groups, int num_workers,
                                            uint64_t seed,
                                            int64_t broadcast_below);

// Computes a plan for `data` (features are used only by the clustering
// methods). Errors: InvalidArgument for num_workers < 1, an empty dataset,
// or clustering options the data cannot satisfy (e.g. more clusters than
// examples). Fills fingerprint and every timing but `load`.
Result<ShardPlan> ComputeShardPlan(const Dataset& data,
                                   const ShardOptions& options);

// Per-example sub-cluster ids for the cluster-stratified sampler when the
// plan has none: PCA over the dataset, then KMeans into `subclusters`
// clusters within each class; id = class * subclusters + sub-cluster.
// Uses pca_components, pca_iter, max_iter, tol, n_init, seed and threads
// from `options`.
// When `plan` is given, adds to its timings and sets its kmeans_* fields.
Result<std::vector<int32_t>> ComputeClassSubclusters(
    const Dataset& data, const ShardOptions& options,
    ShardPlan* plan = nullptr);

}  // namespace strata
