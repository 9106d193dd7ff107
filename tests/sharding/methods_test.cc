#include "sharding/methods.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "sharding/shard_test_util.h"

namespace strata {
namespace {

using testing::Blobs;
using testing::SkewedLabels;

// Every example is in exactly one worker's list, except the broadcast ones,
// which are in none of the lists and in every WorkerShard().
void ExpectPartition(const ShardPlan& plan) {
  std::vector<int> seen(plan.num_examples, 0);
  for (const auto& w : plan.workers) {
    EXPECT_TRUE(std::is_sorted(w.begin(), w.end()));
    for (int64_t i : w) ++seen[i];
  }
  std::set<int64_t> bcast(plan.broadcast.begin(), plan.broadcast.end());
  for (int64_t i = 0; i < plan.num_examples; ++i) {
    if (bcast.count(i)) {
      EXPECT_EQ(seen[i], 0) << "broadcast example " << i << " also in a list";
    } else {
      EXPECT_EQ(seen[i], 1) << "example " << i;
    }
  }
  for (int w = 0; w < static_cast<int>(plan.workers.size()); ++w) {
    const std::vector<int64_t> shard = plan.WorkerShard(w);
    EXPECT_EQ(shard.size(), plan.workers[w].size() + plan.broadcast.size());
    EXPECT_TRUE(std::is_sorted(shard.begin(), shard.end()));
    for (int64_t b : plan.broadcast)
      EXPECT_TRUE(std::binary_search(shard.begin(), shard.end(), b));
  }
}

// counts[w][g] = examples of group g (a label or cluster id) at worker w.
std::vector<std::vector<int64_t>> GroupCounts(const ShardPlan& plan,
                                              const std::vector<int64_t>& group,
                                              int64_t groups) {
  std::vector<std::vector<int64_t>> counts(plan.workers.size(),
                                           std::vector<int64_t>(groups, 0));
  for (size_t w = 0; w < plan.workers.size(); ++w)
    for (int64_t i : plan.workers[w]) ++counts[w][group[i]];
  return counts;
}

int64_t Spread(const std::vector<std::vector<int64_t>>& counts, int64_t g) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& c : counts) lo = std::min(lo, c[g]), hi = std::max(hi, c[g]);
  return hi - lo;
}

ShardOptions Options(ShardMethod m, int workers, uint64_t seed = 1) {
  ShardOptions o;
  o.method = m;
  o.num_workers = workers;
  o.seed = seed;
  return o;
}

TEST(ShardMethodsTest, ParseAndNameRoundTrip) {
  for (const char* name : {"random", "mod", "stratified", "distribution-aware",
                           "class-clusters"}) {
    auto m = ParseShardMethod(name);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_STREQ(ShardMethodName(*m), name);
  }
  auto bad = ParseShardMethod("modulo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("modulo"), std::string::npos);
}

TEST(ShardMethodsTest, ModMatchesIModN) {
  const Dataset d = SkewedLabels(1003, 5, 3);
  auto plan = ComputeShardPlan(d, Options(ShardMethod::kMod, 7));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectPartition(*plan);
  EXPECT_TRUE(plan->broadcast.empty());
  for (int w = 0; w < 7; ++w)
    for (int64_t i : plan->workers[w]) EXPECT_EQ(i % 7, w) << i;
}

TEST(ShardMethodsTest, RandomIsBalancedAtEveryPrefix) {
  const int n = 6;
  const std::vector<int32_t> a = AssignRandom(1000, n, 42);
  std::vector<int64_t> count(n, 0);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_GE(a[i], 0);
    ASSERT_LT(a[i], n);
    // The chosen worker must be one with the fewest examples so far.
    const int64_t fewest = *std::min_element(count.begin(), count.end());
    EXPECT_EQ(count[a[i]], fewest) << "example " << i;
    ++count[a[i]];
  }
  // Random, not a fixed pattern: differs from mod and between seeds, and
  // the same seed repeats.
  EXPECT_NE(a, AssignMod(1000, n));
  EXPECT_NE(a, AssignRandom(1000, n, 43));
  EXPECT_EQ(a, AssignRandom(1000, n, 42));
}

TEST(ShardMethodsTest, RandomPlanCountsDifferByAtMostOne) {
  const Dataset d = SkewedLabels(10007, 10, 5);
  auto plan = ComputeShardPlan(d, Options(ShardMethod::kRandom, 12, 9));
  ASSERT_TRUE(plan.ok());
  ExpectPartition(*plan);
  size_t lo = SIZE_MAX, hi = 0;
  for (const auto& w : plan->workers)
    lo = std::min(lo, w.size()), hi = std::max(hi, w.size());
  EXPECT_LE(hi - lo, 1u);
}

TEST(ShardMethodsTest, StratifiedPerClassCountsDifferByAtMostOne) {
  for (int n : {1, 2, 3, 7, 12, 50}) {
    const Dataset d = SkewedLabels(5003, 10, static_cast<uint64_t>(n));
    auto plan = ComputeShardPlan(d, Options(ShardMethod::kStratified, n, 11));
    ASSERT_TRUE(plan.ok());
    ExpectPartition(*plan);
    const auto counts = GroupCounts(*plan, d.labels, d.num_classes);
    for (int64_t c = 0; c < d.num_classes; ++c)
      EXPECT_LE(Spread(counts, c), 1)
          << "class " << c << ", " << n << " workers";
    // The round robin continues across classes: totals balance too.
    size_t lo = SIZE_MAX, hi = 0;
    for (const auto& w : plan->workers)
      lo = std::min(lo, w.size()), hi = std::max(hi, w.size());
    EXPECT_LE(hi - lo, 1u) << n << " workers";
  }
}

TEST(ShardMethodsTest, StratifiedDependsOnSeedOnly) {
  const Dataset d = SkewedLabels(2000, 4, 1);
  auto a = ComputeShardPlan(d, Options(ShardMethod::kStratified, 3, 5));
  auto b = ComputeShardPlan(d, Options(ShardMethod::kStratified, 3, 5));
  auto c = ComputeShardPlan(d, Options(ShardMethod::kStratified, 3, 6));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->workers, b->workers);
  EXPECT_NE(a->workers, c->workers);
}

TEST(ShardMethodsTest, GroupRoundRobinBroadcastsExactlyTheSmallGroups) {
  // Groups of sizes 10, 3, 4, 0, 1 with 4 workers: 3 and 1 are broadcast,
  // 4 (= n) is not.
  std::vector<int64_t> groups;
  const std::vector<int64_t> sizes = {10, 3, 4, 0, 1};
  for (size_t g = 0; g < sizes.size(); ++g)
    for (int64_t i = 0; i < sizes[g]; ++i) groups.push_back(g);
  const auto a = AssignGroupsRoundRobin(groups, 5, 4, 1, /*below=*/4);
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool small = sizes[groups[i]] < 4;
    EXPECT_EQ(a[i] == kBroadcast, small) << "example " << i;
  }
}

TEST(ShardMethodsTest, DistributionAwareSparseClustersAreExactlyThoseBelowN) {
  // Six large, well-separated blobs and three tiny ones; 5 workers.
  const std::vector<int64_t> sizes = {300, 250, 200, 220, 180, 260, 2, 4, 5};
  const Dataset d = Blobs(sizes, 20, 12.0, 3, 7);
  ShardOptions o = Options(ShardMethod::kDistributionAware, 5, 3);
  o.clusters = static_cast<int64_t>(sizes.size());
  o.pca_components = 10;
  o.n_init = 3;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectPartition(*plan);
  ASSERT_EQ(plan->cluster_ids.size(), static_cast<size_t>(d.size()));
  std::map<int32_t, int64_t> size_of;
  for (int32_t c : plan->cluster_ids) ++size_of[c];
  std::set<int64_t> bcast(plan->broadcast.begin(), plan->broadcast.end());
  int sparse = 0;
  for (auto [c, s] : size_of) sparse += s < 5;
  EXPECT_GE(sparse, 1) << "the test needs at least one sparse cluster";
  for (int64_t i = 0; i < d.size(); ++i) {
    const bool in_sparse = size_of[plan->cluster_ids[i]] < 5;
    EXPECT_EQ(bcast.count(i) == 1, in_sparse) << "example " << i;
  }
  // Dense clusters are spread like classes: counts differ by at most one.
  std::vector<int64_t> cid(plan->cluster_ids.begin(), plan->cluster_ids.end());
  const auto counts = GroupCounts(*plan, cid, plan->num_clusters);
  for (auto [c, s] : size_of) {
    if (s >= 5) {
      EXPECT_LE(Spread(counts, c), 1) << "cluster " << c;
    }
  }
}

TEST(ShardMethodsTest, DistributionAwareDefaultsToTwiceTheClasses) {
  const Dataset d = Blobs({100, 100, 100, 100}, 8, 8.0, 2, 1);
  auto plan =
      ComputeShardPlan(d, Options(ShardMethod::kDistributionAware, 2, 1));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_clusters, 4);
  EXPECT_GT(plan->timings.pca, 0);
  EXPECT_GT(plan->timings.kmeans, 0);
}

TEST(ShardMethodsTest, ClassClustersStratifyOverClassAndSubcluster) {
  // 3 classes, each made of 2 blobs (blob b has label b % 3).
  std::vector<int64_t> blob;
  const Dataset d = Blobs({200, 150, 120, 180, 90, 210}, 16, 10.0, 3, 4, &blob);
  ShardOptions o = Options(ShardMethod::kClassClusters, 4, 2);
  o.subclusters = 2;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectPartition(*plan);
  EXPECT_TRUE(plan->broadcast.empty());
  EXPECT_EQ(plan->num_clusters, 6);
  std::vector<int64_t> cid(plan->cluster_ids.begin(), plan->cluster_ids.end());
  for (int64_t i = 0; i < d.size(); ++i)
    EXPECT_EQ(cid[i] / 2, d.labels[i]) << "sub-cluster outside its class";
  // The sub-clusters are the hidden blobs.
  std::map<int64_t, std::set<int64_t>> blobs_of_cluster;
  for (int64_t i = 0; i < d.size(); ++i)
    blobs_of_cluster[cid[i]].insert(blob[i]);
  EXPECT_EQ(blobs_of_cluster.size(), 6u);
  for (const auto& [c, b] : blobs_of_cluster)
    EXPECT_EQ(b.size(), 1u) << "cluster " << c << " mixes blobs";
  const auto counts = GroupCounts(*plan, cid, 6);
  for (int64_t g = 0; g < 6; ++g) EXPECT_LE(Spread(counts, g), 1) << g;
}

TEST(ShardMethodsTest, SameResultWhateverTheThreadCount) {
  const Dataset d = Blobs({400, 300, 200, 3, 2}, 24, 6.0, 2, 9);
  for (ShardMethod m :
       {ShardMethod::kDistributionAware, ShardMethod::kClassClusters,
        ShardMethod::kRandom, ShardMethod::kStratified}) {
    std::vector<ShardPlan> plans;
    for (int threads : {1, 2, 3, 8}) {
      ShardOptions o = Options(m, 3, 17);
      o.threads = threads;
      o.pca_components = 8;
      o.clusters = 5;
      o.n_init = 2;
      auto p = ComputeShardPlan(d, o);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      plans.push_back(std::move(*p));
    }
    for (size_t i = 1; i < plans.size(); ++i) {
      EXPECT_EQ(plans[i].workers, plans[0].workers) << ShardMethodName(m);
      EXPECT_EQ(plans[i].broadcast, plans[0].broadcast) << ShardMethodName(m);
      EXPECT_EQ(plans[i].cluster_ids, plans[0].cluster_ids)
          << ShardMethodName(m);
    }
  }
}

TEST(ShardMethodsTest, RejectsBadInput) {
  const Dataset d = SkewedLabels(10, 2, 1);
  EXPECT_FALSE(ComputeShardPlan(d, Options(ShardMethod::kMod, 0)).ok());
  ShardOptions o = Options(ShardMethod::kDistributionAware, 2);
  o.clusters = 11;
  auto r = ComputeShardPlan(d, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  Dataset bad = d;
  bad.labels[3] = 7;
  auto b = ComputeShardPlan(bad, Options(ShardMethod::kStratified, 2));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("example 3"), std::string::npos);
  EXPECT_FALSE(ComputeShardPlan(Dataset{}, Options(ShardMethod::kMod, 2)).ok());
}

}  // namespace
}  // namespace strata
