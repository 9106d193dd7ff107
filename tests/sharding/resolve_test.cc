#include "sharding/resolve.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "data/test_util.h"
#include "sharding/plan.h"
#include "sharding/shard_test_util.h"

namespace strata {
namespace {

TEST(ResolveShardsTest, DefaultIsModOverTheWorkers) {
  const Config config;
  EXPECT_EQ(config.GetString("data.sharding.method"), "mod");
  EXPECT_EQ(config.GetString("data.sampler"), "shuffle");
  const Dataset d = testing::SkewedLabels(101, 3, 1);
  auto set = ResolveShards(config, d, 4);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FALSE(set->from_file);
  ASSERT_EQ(set->worker_indices.size(), 4u);
  for (int w = 0; w < 4; ++w) {
    std::vector<int64_t> expected;
    for (int64_t i = w; i < 101; i += 4) expected.push_back(i);
    EXPECT_EQ(set->worker_indices[w], expected);
  }
  EXPECT_TRUE(set->cluster_ids.empty());
  EXPECT_EQ(set->report["method"], "mod");
  EXPECT_EQ(set->report["num_workers"], 4);
}

TEST(ResolveShardsTest, OptionsFromConfig) {
  Config config;
  ASSERT_TRUE(config.ApplyOverride("data.sharding.method=class-clusters").ok());
  ASSERT_TRUE(config.ApplyOverride("run.seed=33").ok());
  ASSERT_TRUE(config.ApplyOverride("data.sharding.subclusters=3").ok());
  ASSERT_TRUE(config.ApplyOverride("data.sharding.clusters=17").ok());
  auto o = ShardOptionsFromConfig(config, 5);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->method, ShardMethod::kClassClusters);
  EXPECT_EQ(o->seed, 33u);  // data.sharding.seed = -1 follows run.seed
  EXPECT_EQ(o->subclusters, 3);
  EXPECT_EQ(o->clusters, 17);
  EXPECT_EQ(o->num_workers, 5);
  ASSERT_TRUE(config.ApplyOverride("data.sharding.seed=4").ok());
  EXPECT_EQ(ShardOptionsFromConfig(config, 5)->seed, 4u);
  EXPECT_FALSE(config.ApplyOverride("data.sharding.method=nope").ok());
  EXPECT_FALSE(ShardOptionsFromConfig(config, 0).ok());
}

TEST(ResolveShardsTest, UsesAPlanFileAndChecksIt) {
  const Dataset d = testing::Blobs({100, 80, 60, 2}, 8, 10.0, 2, 3);
  ShardOptions o;
  o.method = ShardMethod::kDistributionAware;
  o.num_workers = 3;
  o.clusters = 4;
  o.pca_components = 4;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok());
  testing::TempDir dir;
  const std::string path = dir.File("plan.json");
  ASSERT_TRUE(SaveShardPlan(*plan, path).ok());

  Config config;
  ASSERT_TRUE(config.Set("data.shard_plan", path).ok());
  auto set = ResolveShards(config, d, 3);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_TRUE(set->from_file);
  EXPECT_EQ(set->cluster_ids, plan->cluster_ids);
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(set->worker_indices[w], plan->WorkerShard(w));
    // Broadcast examples are in every worker's shard.
    for (int64_t b : plan->broadcast)
      EXPECT_TRUE(std::binary_search(set->worker_indices[w].begin(),
                                     set->worker_indices[w].end(), b));
  }
  EXPECT_EQ(set->report["broadcast_size"], plan->broadcast.size());

  auto wrong_n = ResolveShards(config, d, 2);
  ASSERT_FALSE(wrong_n.ok());
  EXPECT_EQ(wrong_n.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(wrong_n.status().message().find("3 workers"), std::string::npos);
  EXPECT_NE(wrong_n.status().message().find("2 workers"), std::string::npos);

  Dataset other = d;
  other.features[5] += 1.0f;
  auto wrong_data = ResolveShards(config, other, 3);
  ASSERT_FALSE(wrong_data.ok());
  EXPECT_EQ(wrong_data.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(wrong_data.status().message().find(DatasetFingerprint(other)),
            std::string::npos);

  ASSERT_TRUE(config.Set("data.shard_plan", dir.File("nope.json")).ok());
  EXPECT_EQ(ResolveShards(config, d, 3).status().code(),
            Status::Code::kNotFound);
}

TEST(ResolveShardsTest, ClusterStratifiedSamplerGetsSubclusters) {
  const Dataset d = testing::Blobs({100, 100, 80, 90}, 6, 10.0, 2, 8);
  Config config;
  ASSERT_TRUE(config.ApplyOverride("data.sharding.method=stratified").ok());
  ASSERT_TRUE(config.ApplyOverride("data.sampler=cluster-stratified").ok());
  auto set = ResolveShards(config, d, 2);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_TRUE(set->plan.cluster_ids.empty());  // stratified makes none
  ASSERT_EQ(set->cluster_ids.size(), static_cast<size_t>(d.size()));
  for (int64_t i = 0; i < d.size(); ++i)
    EXPECT_EQ(set->cluster_ids[i] / 2, d.labels[i]);
}

}  // namespace
}  // namespace strata
