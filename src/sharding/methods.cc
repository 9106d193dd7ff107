#include "sharding/methods.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "common/log.h"
#include "sharding/kmeans.h"
#include "sharding/linalg.h"
#include "sharding/pca.h"
#include "sharding/plan.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Independent streams of one seed for the phases of a method.
enum Stream : uint64_t { kPca = 1, kKMeans = 2, kAssign = 3, kSubKMeans = 4 };

Result<PcaResult> Project(const Dataset& data, const ShardOptions& o) {
  PcaOptions po;
  po.n_components = o.pca_components;
  po.n_iter = o.pca_iter;
  po.solver = o.pca_solver;
  po.seed = MixSeed(o.seed, kPca);
  po.threads = o.threads;
  return RandomizedPca(data.features.data(), data.size(), data.example_size(),
                       po);
}

Status CheckDataset(const Dataset& data) {
  if (data.size() == 0) return Status::InvalidArgument("the dataset is empty");
  if (data.num_classes < 1)
    return Status::InvalidArgument("the dataset has no classes");
  for (int64_t i = 0; i < data.size(); ++i) {
    if (data.labels[i] < 0 || data.labels[i] >= data.num_classes) {
      return Status::InvalidArgument("example {} has label {}, outside [0, {})",
                                     i, data.labels[i], data.num_classes);
    }
  }
  return Status::Ok();
}

}  // namespace

const char* PcaSolverName(PcaSolver solver) {
  return solver == PcaSolver::kPowerIteration ? "power" : "krylov";
}

Result<PcaSolver> ParsePcaSolver(const std::string& name) {
  if (name == "krylov") return PcaSolver::kBlockKrylov;
  if (name == "power") return PcaSolver::kPowerIteration;
  return Status::InvalidArgument("unknown PCA solver '{}' (krylov or power)",
                                 name);
}

const char* ShardMethodName(ShardMethod method) {
  switch (method) {
    case ShardMethod::kRandom:
      return "random";
    case ShardMethod::kMod:
      return "mod";
    case ShardMethod::kStratified:
      return "stratified";
    case ShardMethod::kDistributionAware:
      return "distribution-aware";
    case ShardMethod::kClassClusters:
      return "class-clusters";
  }
  return "?";
}

Result<ShardMethod> ParseShardMethod(const std::string& name) {
  for (ShardMethod m :
       {ShardMethod::kRandom, ShardMethod::kMod, ShardMethod::kStratified,
        ShardMethod::kDistributionAware, ShardMethod::kClassClusters}) {
    if (name == ShardMethodName(m)) return m;
  }
  return Status::InvalidArgument(
      "unknown sharding method '{}' (random, mod, stratified, "
      "distribution-aware or class-clusters)",
      name);
}

bool UsesClustering(ShardMethod method) {
  return method == ShardMethod::kDistributionAware ||
         method == ShardMethod::kClassClusters;
}

std::vector<int64_t> ShardPlan::WorkerShard(int w) const {
  STRATA_CHECK(w >= 0 && w < static_cast<int>(workers.size()));
  std::vector<int64_t> out(workers[w].size() + broadcast.size());
  std::merge(workers[w].begin(), workers[w].end(), broadcast.begin(),
             broadcast.end(), out.begin());
  return out;
}

std::vector<int32_t> AssignRandom(int64_t num_examples, int num_workers,
                                  uint64_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(num_examples));
  std::vector<int32_t> perm(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) perm[w] = w;
  std::mt19937_64 rng(MixSeed(seed, kAssign));
  for (int64_t start = 0; start < num_examples; start += num_workers) {
    // Within a round every worker has the same count until it is chosen, so
    // the workers still free are exactly those with the fewest examples.
    PortableShuffle(&perm, rng);
    const int64_t end = std::min<int64_t>(num_examples, start + num_workers);
    for (int64_t i = start; i < end; ++i) out[i] = perm[i - start];
  }
  return out;
}

std::vector<int32_t> AssignMod(int64_t num_examples, int num_workers) {
  std::vector<int32_t> out(static_cast<size_t>(num_examples));
  for (int64_t i = 0; i < num_examples; ++i)
    out[i] = static_cast<int32_t>(i % num_workers);
  return out;
}

std::vector<int32_t> AssignGroupsRoundRobin(const std::vector<int64_t>& groups,
                                            int64_t num_groups, int num_workers,
                                            uint64_t seed,
                                            int64_t broadcast_below) {
  const int64_t n = static_cast<int64_t>(groups.size());
  // Counting sort: members of each group in index order.
  std::vector<int64_t> start(static_cast<size_t>(num_groups + 1), 0);
  for (int64_t g : groups) {
    STRATA_CHECK(g >= 0 && g < num_groups);
    ++start[g + 1];
  }
  for (int64_t g = 0; g < num_groups; ++g) start[g + 1] += start[g];
  std::vector<int64_t> members(static_cast<size_t>(n));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) members[fill[groups[i]]++] = i;
  }
  std::vector<int32_t> out(static_cast<size_t>(n), kBroadcast);
  int64_t offset = 0;
  std::vector<int64_t> group;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t size = start[g + 1] - start[g];
    if (size == 0 || size < broadcast_below) continue;  // broadcast
    group.assign(members.begin() + start[g], members.begin() + start[g + 1]);
    std::mt19937_64 rng(MixSeed(seed, static_cast<uint64_t>(g)));
    PortableShuffle(&group, rng);
    for (int64_t j = 0; j < size; ++j)
      out[group[j]] = static_cast<int32_t>((offset + j) % num_workers);
    offset = (offset + size) % num_workers;
  }
  return out;
}

Result<std::vector<int32_t>> ComputeClassSubclusters(const Dataset& data,
                                                     const ShardOptions& o,
                                                     ShardPlan* plan) {
  RETURN_IF_ERROR(CheckDataset(data));
  if (o.subclusters < 1) {
    return Status::InvalidArgument("subclusters must be >= 1, got {}",
                                   o.subclusters);
  }
  auto t = Clock::now();
  ASSIGN_OR_RETURN(PcaResult pca, Project(data, o));
  if (plan != nullptr) {
    plan->timings.pca += Since(t);
    for (double v : pca.explained_variance) plan->pca_variance += v;
  }
  t = Clock::now();
  const int64_t k = pca.n_components, m = o.subclusters;
  std::vector<int32_t> ids(static_cast<size_t>(data.size()), 0);
  std::vector<std::vector<int64_t>> by_class(
      static_cast<size_t>(data.num_classes));
  for (int64_t i = 0; i < data.size(); ++i)
    by_class[data.labels[i]].push_back(i);
  std::vector<float> rows;
  for (int64_t c = 0; c < data.num_classes; ++c) {
    const auto& members = by_class[c];
    if (members.empty()) continue;
    const int64_t mc = std::min<int64_t>(m, members.size());
    if (mc == 1) {
      for (int64_t i : members) ids[i] = static_cast<int32_t>(c * m);
      continue;
    }
    rows.resize(members.size() * k);
    for (size_t r = 0; r < members.size(); ++r)
      std::copy(pca.transformed.begin() + members[r] * k,
                pca.transformed.begin() + (members[r] + 1) * k,
                rows.begin() + r * k);
    KMeansOptions ko;
    ko.k = mc;
    ko.max_iter = o.max_iter;
    ko.tol = o.tol;
    ko.n_init = o.n_init;
    ko.seed = MixSeed(MixSeed(o.seed, kSubKMeans), static_cast<uint64_t>(c));
    ko.threads = o.threads;
    ASSIGN_OR_RETURN(
        KMeansResult km,
        KMeans(rows.data(), static_cast<int64_t>(members.size()), k, ko));
    for (size_t r = 0; r < members.size(); ++r)
      ids[members[r]] = static_cast<int32_t>(c * m + km.labels[r]);
    if (plan != nullptr) {
      plan->kmeans_inertia += km.inertia;
      plan->kmeans_iterations = std::max(plan->kmeans_iterations, km.n_iter);
    }
  }
  if (plan != nullptr) plan->timings.kmeans += Since(t);
  return ids;
}

// distribution-aware: PCA, KMeans over the projection, then the clusters
// dealt round robin (a cluster with fewer members than workers is broadcast).
Result<std::vector<int32_t>> AssignDistributionAware(const Dataset& data,
                                                     const ShardOptions& o,
                                                     ShardPlan& plan) {
  const int n = o.num_workers;
  const int64_t size = data.size();
  const int64_t k = o.clusters > 0 ? o.clusters : 2 * data.num_classes;
  if (k > size) {
    return Status::InvalidArgument(
        "distribution-aware: {} clusters for {} examples", k, size);
  }
  auto t = Clock::now();
  ASSIGN_OR_RETURN(PcaResult pca, Project(data, o));
  plan.timings.pca = Since(t);
  for (double v : pca.explained_variance) plan.pca_variance += v;
  LogDebug("sharding: PCA to {} dimensions in {:.2f} s", pca.n_components,
           plan.timings.pca);
  t = Clock::now();
  KMeansOptions ko;
  ko.k = k;
  ko.max_iter = o.max_iter;
  ko.tol = o.tol;
  ko.n_init = o.n_init;
  ko.seed = MixSeed(o.seed, kKMeans);
  ko.threads = o.threads;
  ASSIGN_OR_RETURN(KMeansResult km,
                   KMeans(pca.transformed.data(), size, pca.n_components, ko));
  plan.timings.kmeans = Since(t);
  plan.kmeans_inertia = km.inertia;
  plan.kmeans_iterations = km.n_iter;
  LogDebug("sharding: KMeans k={} in {} iterations, inertia {:.6g}", k,
           km.n_iter, km.inertia);
  t = Clock::now();
  plan.cluster_ids = std::move(km.labels);
  plan.num_clusters = k;
  std::vector<int64_t> groups(plan.cluster_ids.begin(), plan.cluster_ids.end());
  std::vector<int32_t> worker = AssignGroupsRoundRobin(groups, k, n, o.seed, n);
  plan.timings.assign = Since(t);
  return worker;
}

// The per-worker lists (ascending) and the broadcast set of an assignment.
void FillWorkerLists(const std::vector<int32_t>& worker, int n,
                     ShardPlan& plan) {
  const int64_t size = static_cast<int64_t>(worker.size());
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  for (int32_t w : worker)
    if (w != kBroadcast) ++counts[w];
  plan.workers.resize(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) plan.workers[w].reserve(counts[w]);
  for (int64_t i = 0; i < size; ++i) {
    if (worker[i] == kBroadcast) {
      plan.broadcast.push_back(i);
    } else {
      plan.workers[worker[i]].push_back(i);
    }
  }
}

Result<ShardPlan> ComputeShardPlan(const Dataset& data,
                                   const ShardOptions& options) {
  const auto start = Clock::now();
  if (options.num_workers < 1) {
    return Status::InvalidArgument("num_workers must be >= 1, got {}",
                                   options.num_workers);
  }
  RETURN_IF_ERROR(CheckDataset(data));
  ShardPlan plan;
  plan.options = options;
  plan.dataset_name = data.name;
  plan.num_examples = data.size();
  plan.num_classes = data.num_classes;
  auto t = Clock::now();
  if (options.fingerprint) {
    plan.fingerprint = DatasetFingerprint(data);
    plan.timings.fingerprint = Since(t);
  }

  const int n = options.num_workers;
  const int64_t size = data.size();
  std::vector<int32_t> worker;
  switch (options.method) {
    case ShardMethod::kRandom:
      t = Clock::now();
      worker = AssignRandom(size, n, options.seed);
      plan.timings.assign = Since(t);
      break;
    case ShardMethod::kMod:
      t = Clock::now();
      worker = AssignMod(size, n);
      plan.timings.assign = Since(t);
      break;
    case ShardMethod::kStratified:
      t = Clock::now();
      worker = AssignGroupsRoundRobin(data.labels, data.num_classes, n,
                                      options.seed, 0);
      plan.timings.assign = Since(t);
      break;
    case ShardMethod::kDistributionAware: {
      ASSIGN_OR_RETURN(worker, AssignDistributionAware(data, options, plan));
      break;
    }
    case ShardMethod::kClassClusters: {
      ASSIGN_OR_RETURN(plan.cluster_ids,
                       ComputeClassSubclusters(data, options, &plan));
      t = Clock::now();
      plan.num_clusters = data.num_classes * options.subclusters;
      std::vector<int64_t> groups(plan.cluster_ids.begin(),
                                  plan.cluster_ids.end());
      worker =
          AssignGroupsRoundRobin(groups, plan.num_clusters, n, options.seed, 0);
      plan.timings.assign = Since(t);
      break;
    }
  }

  t = Clock::now();
  FillWorkerLists(worker, n, plan);
  plan.timings.assign += Since(t);
  plan.timings.total = Since(start);
  return plan;
}

}  // namespace strata
