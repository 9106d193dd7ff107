// Real MNIST (STRATA_DATA_DIR): the sharding paper's comparison of random
// and stratified shards for 12 workers.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/fs.h"
#include "data/readers.h"
#include "sharding/methods.h"
#include "sharding/report.h"

namespace strata {
namespace {

TEST(MnistShardTest, StratifiedIsFarCloserToTheGlobalClassMixThanRandom) {
  const char* root = std::getenv("STRATA_DATA_DIR");
  if (root == nullptr) {
    GTEST_SKIP() << "STRATA_DATA_DIR not set: skipping the real-MNIST "
                    "sharding test";
  }
  auto data = LoadMnistFamily(JoinPath(root, "mnist"), "mnist");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const Dataset& train = data->train;
  ASSERT_EQ(train.size(), 60000);
  nlohmann::json reports[2];
  int i = 0;
  for (ShardMethod m : {ShardMethod::kRandom, ShardMethod::kStratified}) {
    ShardOptions o;
    o.method = m;
    o.num_workers = 12;
    o.seed = 1;
    auto plan = ComputeShardPlan(train, o);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    reports[i++] = MakeShardReport(*plan, train.labels);
  }
  const double random_max = reports[0]["tv_distance"]["max"].get<double>();
  const double strat_max = reports[1]["tv_distance"]["max"].get<double>();
  std::printf("%s\n%s\n", FormatShardReport(reports[0]).c_str(),
              FormatShardReport(reports[1]).c_str());
  EXPECT_LT(strat_max, 0.01);
  EXPECT_GT(random_max, strat_max);
  // Both give every worker 5000 examples; stratified also spreads every
  // class within one example.
  for (const auto& r : reports)
    for (const auto& w : r["per_worker"]) EXPECT_EQ(w["count"], 5000);
  for (const auto& c : reports[1]["per_class"])
    EXPECT_LE(c["max"].get<int64_t>() - c["min"].get<int64_t>(), 1);
}

}  // namespace
}  // namespace strata
