// `strata shard` end to end, in-process, on synthetic data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/commands.h"
#include "common/fs.h"
#include "sharding/plan.h"

namespace strata {
namespace {

using testing::RunStrata;

std::string TempDir() { return testing::CliTempDir("shard_cli_test"); }

TEST(ShardCliTest, WritesAPlanAndItsReport) {
  const std::string dir = TempDir();
  ASSERT_EQ(RunStrata({"shard", "--set", "data.synthetic.train_size=600",
                       "--set", "data.synthetic.val_size=50", "-n", "3", "-m",
                       "stratified", "--seed", "5", "-o", dir + "/p.json"}),
            0);
  auto plan = LoadShardPlan(dir + "/p.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->options.method, ShardMethod::kStratified);
  EXPECT_EQ(plan->options.num_workers, 3);
  EXPECT_EQ(plan->options.seed, 5u);
  EXPECT_EQ(plan->num_examples, 600);
  EXPECT_GT(plan->timings.load, 0);
  auto text = ReadFile(dir + "/p.report.json");
  ASSERT_TRUE(text.ok());
  const auto report = nlohmann::json::parse(*text);
  EXPECT_EQ(report["method"], "stratified");
  EXPECT_EQ(report["per_worker"].size(), 3u);
  EXPECT_LT(report["tv_distance"]["max"].get<double>(), 0.01);
}

TEST(ShardCliTest, WorkersDefaultToTheConfigAndBadInputIsExitCode2) {
  const std::string dir = TempDir();
  ASSERT_EQ(
      RunStrata({"shard", "--set", "data.synthetic.train_size=300", "--set",
                 "data.synthetic.val_size=50", "--set", "cluster.workers=5",
                 "-o", dir + "/p.json", "--report", dir + "/r.json"}),
      0);
  auto plan = LoadShardPlan(dir + "/p.json");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->options.num_workers, 5);
  EXPECT_EQ(plan->options.method, ShardMethod::kMod);
  EXPECT_TRUE(FileExists(dir + "/r.json"));
  EXPECT_EQ(RunStrata({"shard", "-m", "nope", "-o", dir + "/q.json"}), 2);
  EXPECT_EQ(RunStrata({"shard", "--set", "no.such.key=1"}), 2);
  EXPECT_FALSE(FileExists(dir + "/q.json"));
}

}  // namespace
}  // namespace strata
