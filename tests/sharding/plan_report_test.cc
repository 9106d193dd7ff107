#include <gtest/gtest.h>

#include <fstream>

#include "common/fs.h"
#include "data/test_util.h"
#include "sharding/plan.h"
#include "sharding/report.h"
#include "sharding/shard_test_util.h"

namespace strata {
namespace {

using nlohmann::json;
using testing::TempDir;

ShardPlan DistributionAwarePlan(const Dataset& d, int workers) {
  ShardOptions o;
  o.method = ShardMethod::kDistributionAware;
  o.num_workers = workers;
  o.seed = 77;
  o.clusters = 6;
  o.pca_components = 5;
  o.tol = 1e-5;
  o.n_init = 2;
  auto plan = ComputeShardPlan(d, o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(*plan);
}

TEST(ShardPlanTest, RoundTripKeepsEverything) {
  const Dataset d = testing::Blobs({120, 90, 60, 2, 3, 80}, 12, 9.0, 3, 5);
  const ShardPlan plan = DistributionAwarePlan(d, 4);
  ASSERT_FALSE(plan.broadcast.empty()) << "the test wants a broadcast set";
  TempDir dir;
  const std::string path = dir.File("sub/plan.json");
  ASSERT_TRUE(SaveShardPlan(plan, path).ok());
  auto loaded = LoadShardPlan(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->options.method, plan.options.method);
  EXPECT_EQ(loaded->options.num_workers, 4);
  EXPECT_EQ(loaded->options.seed, 77u);
  EXPECT_EQ(loaded->options.clusters, 6);
  EXPECT_EQ(loaded->options.pca_components, 5);
  EXPECT_EQ(loaded->options.n_init, 2);
  EXPECT_DOUBLE_EQ(loaded->options.tol, 1e-5);
  EXPECT_EQ(loaded->dataset_name, d.name);
  EXPECT_EQ(loaded->fingerprint, DatasetFingerprint(d));
  EXPECT_EQ(loaded->num_examples, d.size());
  EXPECT_EQ(loaded->num_classes, 3);
  EXPECT_EQ(loaded->workers, plan.workers);
  EXPECT_EQ(loaded->broadcast, plan.broadcast);
  EXPECT_EQ(loaded->cluster_ids, plan.cluster_ids);
  EXPECT_EQ(loaded->num_clusters, 6);
  EXPECT_DOUBLE_EQ(loaded->timings.pca, plan.timings.pca);
  EXPECT_DOUBLE_EQ(loaded->timings.total, plan.timings.total);
}

TEST(ShardPlanTest, APlanWithoutFingerprintIsNotSaved) {
  // Plans computed at the start of a run skip the dataset hash; such a plan
  // cannot be checked later, so it is never written.
  const Dataset d = testing::Blobs({40, 40}, 4, 9.0, 2, 5);
  ShardOptions o;
  o.method = ShardMethod::kStratified;
  o.num_workers = 3;
  o.fingerprint = false;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->fingerprint.empty());
  EXPECT_EQ(plan->timings.fingerprint, 0.0);
  TempDir dir;
  Status saved = SaveShardPlan(*plan, dir.File("plan.json"));
  EXPECT_EQ(saved.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(saved.message().find("fingerprint"), std::string::npos);
  EXPECT_FALSE(ReadFile(dir.File("plan.json")).ok());
}

TEST(ShardPlanTest, FingerprintFollowsTheData) {
  Dataset d = testing::SkewedLabels(500, 3, 1);
  const std::string f = DatasetFingerprint(d);
  EXPECT_EQ(f.rfind("md5:", 0), 0u);
  EXPECT_EQ(f.size(), 4u + 32u);
  EXPECT_EQ(DatasetFingerprint(d), f);
  Dataset g = d;
  g.features[123] += 1e-3f;
  EXPECT_NE(DatasetFingerprint(g), f);
  Dataset h = d;
  h.labels[0] = (h.labels[0] + 1) % 3;
  ASSERT_NE(h.labels, d.labels);
  EXPECT_NE(DatasetFingerprint(h), f);
}

TEST(ShardPlanTest, MismatchesAreRejectedNamingBothValues) {
  const Dataset d = testing::SkewedLabels(300, 3, 2);
  ShardOptions o;
  o.method = ShardMethod::kStratified;
  o.num_workers = 4;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(
      CheckPlanMatches(*plan, DatasetFingerprint(d), 4, "plan.json").ok());

  Dataset other = d;
  other.features[0] = -1;
  const std::string theirs = DatasetFingerprint(other);
  Status st = CheckPlanMatches(*plan, theirs, 4, "plan.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find(plan->fingerprint), std::string::npos);
  EXPECT_NE(st.message().find(theirs), std::string::npos);
  EXPECT_NE(st.message().find("plan.json"), std::string::npos);

  st = CheckPlanMatches(*plan, plan->fingerprint, 6, "plan.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("4 workers"), std::string::npos);
  EXPECT_NE(st.message().find("6 workers"), std::string::npos);
}

TEST(ShardPlanTest, LoadRejectsBrokenFiles) {
  TempDir dir;
  EXPECT_EQ(LoadShardPlan(dir.File("missing.json")).status().code(),
            Status::Code::kNotFound);
  const std::string bad = dir.File("bad.json");
  ASSERT_TRUE(WriteFileAtomic(bad, "{not json").ok());
  auto r = LoadShardPlan(bad);
  EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(r.status().message().find(bad), std::string::npos);

  // A valid plan, then edited to break one invariant at a time.
  const Dataset d = testing::SkewedLabels(40, 2, 3);
  ShardOptions o;
  o.num_workers = 3;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok());
  const std::string good = dir.File("good.json");
  ASSERT_TRUE(SaveShardPlan(*plan, good).ok());
  const json j = json::parse(*ReadFile(good));
  auto expect_rejected = [&](json edited, const std::string& what) {
    const std::string p = dir.File("edited.json");
    ASSERT_TRUE(WriteFileAtomic(p, edited.dump()).ok());
    auto res = LoadShardPlan(p);
    ASSERT_FALSE(res.ok()) << what;
    EXPECT_EQ(res.status().code(), Status::Code::kDataLoss) << what;
    EXPECT_NE(res.status().message().find(what), std::string::npos)
        << res.status().message();
  };
  json dup = j;
  dup["workers"][1] = json(std::vector<int64_t>{0, 1});  // 0 is worker 0's
  expect_rejected(dup, "more than one shard");
  json missing = j;
  missing["workers"][2].erase(missing["workers"][2].begin());
  expect_rejected(missing, "in no shard");
  json range = j;
  range["workers"][2].push_back(40);
  expect_rejected(range, "outside");
  json count = j;
  count["num_workers"] = 2;
  expect_rejected(count, "num_workers");
  json format = j;
  format["format"] = "something-else";
  expect_rejected(format, "not a shard plan");
  json field = j;
  field.erase("broadcast");
  expect_rejected(field, "malformed");
}

TEST(ShardReportTest, CountsSpreadAndDistances) {
  // 8 examples, 2 classes (labels 0 0 0 0 1 1 1 1), 2 workers by hand plus
  // one broadcast example.
  Dataset d;
  d.num_classes = 2;
  d.labels = {0, 0, 0, 0, 1, 1, 1, 1};
  d.features.assign(8, 0.0f);
  ShardPlan plan;
  plan.options.method = ShardMethod::kDistributionAware;
  plan.options.num_workers = 2;
  plan.options.seed = 5;
  plan.num_examples = 8;
  plan.num_classes = 2;
  plan.workers = {{0, 1, 2, 4}, {3, 5, 6}};
  plan.broadcast = {7};
  plan.cluster_ids = {0, 0, 0, 0, 1, 1, 1, 2};
  plan.num_clusters = 3;
  plan.timings.pca = 1.5;
  const json r = MakeShardReport(plan, d.labels);
  EXPECT_EQ(r["method"], "distribution-aware");
  EXPECT_EQ(r["num_workers"], 2);
  EXPECT_EQ(r["seed"], 5);
  EXPECT_EQ(r["num_examples"], 8);
  EXPECT_EQ(r["num_classes"], 2);
  // worker 0: {0,1,2,4} + 7 -> class counts (3, 2); worker 1: (1, 3).
  EXPECT_EQ(r["per_worker"][0]["count"], 5);
  EXPECT_EQ(r["per_worker"][0]["class_counts"], json({3, 2}));
  EXPECT_EQ(r["per_worker"][1]["count"], 4);
  EXPECT_EQ(r["per_worker"][1]["class_counts"], json({1, 3}));
  EXPECT_EQ(r["per_class"][0]["min"], 1);
  EXPECT_EQ(r["per_class"][0]["max"], 3);
  EXPECT_DOUBLE_EQ(r["per_class"][0]["median"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(r["per_class"][0]["q1"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["per_class"][0]["q3"].get<double>(), 2.5);
  // TV: worker 0 (0.6, 0.4) vs (0.5, 0.5) -> 0.1; worker 1 (0.25, 0.75) ->
  // 0.25.
  EXPECT_NEAR(r["tv_distance"]["per_worker"][0].get<double>(), 0.1, 1e-12);
  EXPECT_NEAR(r["tv_distance"]["per_worker"][1].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(r["tv_distance"]["max"].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(r["tv_distance"]["mean"].get<double>(), 0.175, 1e-12);
  EXPECT_EQ(r["broadcast_size"], 1);
  // Cluster sizes 4, 3, 1 with 2 workers: only the size-1 one is sparse.
  EXPECT_EQ(r["sparse_clusters"]["count"], 1);
  EXPECT_DOUBLE_EQ(r["sparse_clusters"]["mean_size"].get<double>(), 1.0);
  for (const char* k : {"load", "pca", "kmeans", "assign", "total"})
    EXPECT_TRUE(r["timings_s"].contains(k)) << k;
  EXPECT_DOUBLE_EQ(r["timings_s"]["pca"].get<double>(), 1.5);

  const std::string table = FormatShardReport(r);
  EXPECT_NE(table.find("distribution-aware"), std::string::npos);
  EXPECT_NE(table.find("max 0.25000"), std::string::npos) << table;

  TempDir dir;
  ASSERT_TRUE(WriteShardReport(r, dir.File("shard_report.json")).ok());
  EXPECT_EQ(json::parse(*ReadFile(dir.File("shard_report.json"))), r);
}

TEST(ShardReportTest, NoClusteringGivesZeroSparseClusters) {
  const Dataset d = testing::SkewedLabels(100, 4, 1);
  ShardOptions o;
  o.method = ShardMethod::kRandom;
  o.num_workers = 3;
  auto plan = ComputeShardPlan(d, o);
  ASSERT_TRUE(plan.ok());
  const json r = MakeShardReport(*plan, d.labels);
  EXPECT_EQ(r["sparse_clusters"]["count"], 0);
  EXPECT_EQ(r["sparse_clusters"]["mean_size"], 0.0);
  EXPECT_EQ(r["broadcast_size"], 0);
  int64_t total = 0;
  for (const auto& w : r["per_worker"]) total += w["count"].get<int64_t>();
  EXPECT_EQ(total, 100);
}

}  // namespace
}  // namespace strata
