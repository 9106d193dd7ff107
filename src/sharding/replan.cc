#include "sharding/replan.h"

#include <algorithm>
#include <cmath>

namespace strata {

std::vector<std::vector<int64_t>> SplitRemainder(
    const ShardPlan& plan, const std::vector<int64_t>& remaining,
    const std::vector<int64_t>& labels, int64_t num_classes, int num_workers,
    uint64_t seed) {
  std::vector<int64_t> ids = remaining;
  std::sort(ids.begin(), ids.end());
  const int64_t size = static_cast<int64_t>(ids.size());
  const uint64_t split_seed =
      plan.options.seed ^ (seed * 0x9E3779B97F4A7C15ULL);
  std::vector<int32_t> worker;
  switch (plan.options.method) {
    case ShardMethod::kMod:
      worker = AssignMod(size, num_workers);
      break;
    case ShardMethod::kRandom:
      worker = AssignRandom(size, num_workers, split_seed);
      break;
    case ShardMethod::kStratified:
    case ShardMethod::kDistributionAware:
    case ShardMethod::kClassClusters: {
      const bool clusters = plan.options.method != ShardMethod::kStratified &&
                            !plan.cluster_ids.empty();
      std::vector<int64_t> groups(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        groups[i] = clusters ? plan.cluster_ids[ids[i]] : labels[ids[i]];
      }
      const int64_t num_groups = clusters ? plan.num_clusters : num_classes;
      worker = AssignGroupsRoundRobin(groups, num_groups, num_workers,
                                      split_seed, 0);
      break;
    }
  }
  std::vector<std::vector<int64_t>> parts(num_workers);
  for (size_t i = 0; i < ids.size(); ++i) parts[worker[i]].push_back(ids[i]);
  return parts;
}

double ClassTv(const std::vector<int64_t>& part,
               const std::vector<int64_t>& labels, int64_t num_classes) {
  if (part.empty() || labels.empty()) return 0;
  std::vector<double> global(num_classes, 0), local(num_classes, 0);
  for (int64_t y : labels) global[y] += 1;
  for (int64_t i : part) local[labels[i]] += 1;
  double tv = 0;
  for (int64_t c = 0; c < num_classes; ++c) {
    tv += std::abs(global[c] / labels.size() - local[c] / part.size());
  }
  return tv / 2;
}

}  // namespace strata
