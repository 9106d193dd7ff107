#include "experiment/report.h"

#include <gtest/gtest.h>

#include "common/fs.h"
#include "test_util.h"

namespace strata {
namespace {

using testing_util::FreshDir;

// A run directory written by hand: two workers' metrics, an eval curve, a
// staleness histogram and a shard report.
std::string FakeRunDir(const std::string& root, const std::string& name,
                       double offset) {
  const std::string dir = JoinPath(root, name);
  EXPECT_TRUE(MakeDirs(dir).ok());
  std::string metrics, eval;
  for (int step = 10; step <= 40; step += 10) {
    for (int w = 0; w < 2; ++w) {
      metrics +=
          nlohmann::json{{"worker", w},
                         {"step", step},
                         {"train_loss", 2.0 - step / 40.0 + w * 0.2 + offset},
                         {"train_acc", step / 50.0}}
              .dump() +
          "\n";
    }
  }
  for (int step = 0; step <= 40; step += 20) {
    eval += nlohmann::json{{"step", step},
                           {"val_loss", 2.0 - step / 40.0 + offset},
                           {"val_acc", step / 50.0}}
                .dump() +
            "\n";
  }
  eval += "{\"step\": 50, \"val_lo";  // a line cut by a crash is skipped
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "metrics.jsonl"), metrics).ok());
  EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "eval.jsonl"), eval).ok());
  nlohmann::json summary = {
      {"interrupted", false},
      {"final_train_loss", 1.0 + offset},
      {"final_train_acc", 0.8},
      {"final_val_loss", 1.1},
      {"final_val_acc", 0.79},
      {"wall_s", 3.0},
      {"train_s", 2.5},
      {"samples_per_s", 100.0},
      {"staleness_histogram", {{"0", 30}, {"2", 10}, {"1", 60}}}};
  EXPECT_TRUE(
      WriteFileAtomic(JoinPath(dir, "summary.json"), summary.dump()).ok());
  nlohmann::json shard = {
      {"method", "random"},
      {"num_workers", 2},
      {"seed", 1},
      {"num_examples", 40},
      {"num_classes", 4},
      {"per_worker",
       {{{"worker", 0}, {"count", 20}, {"class_counts", {4, 1, 3, 2}}},
        {{"worker", 1}, {"count", 20}, {"class_counts", {6, 5, 4, 5}}}}},
      {"timings_s",
       {{"load", 0.1},
        {"fingerprint", 0.005},
        {"pca", 0},
        {"kmeans", 0},
        {"assign", 0.01},
        {"total", 0.12}}}};
  EXPECT_TRUE(
      WriteFileAtomic(JoinPath(dir, "shard_report.json"), shard.dump()).ok());
  return dir;
}

TEST(ReportTest, RunDirectoryData) {
  const std::string dir = FakeRunDir(FreshDir("run"), "r1", 0.0);
  auto data = LoadResults(dir);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_TRUE(data->single_run);
  nlohmann::json d = ReportData(*data, Summarize(*data));
  ASSERT_EQ(d["runs"].size(), 1u);
  const auto& run = d["runs"][0];
  // Workers averaged per step: (2.0 - 0.25) and (2.2 - 0.25) -> 1.85.
  ASSERT_EQ(run["train"]["x"].size(), 4u);
  EXPECT_NEAR(run["train"]["loss"][0].get<double>(), 1.85, 1e-12);
  // The cut line is skipped.
  EXPECT_EQ(run["val"]["x"].size(), 3u);
  // Staleness sorted numerically.
  EXPECT_EQ(run["staleness"]["x"], nlohmann::json({0, 1, 2}));
  EXPECT_EQ(run["staleness"]["count"], nlohmann::json({30, 60, 10}));
  // Boxes: worker 0 counts {1,2,3,4}: 1, 1.75, 2.5, 3.25, 4.
  const auto& box = run["shard"]["boxes"][0];
  EXPECT_DOUBLE_EQ(box[1].get<double>(), 1.75);
  EXPECT_DOUBLE_EQ(box[2].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(run["shard"]["timings_s"]["total"].get<double>(), 0.12);
  // Every phase of timings_s is charted (fingerprint included), not "total".
  const nlohmann::json phases = {"load", "fingerprint", "pca", "kmeans",
                                 "assign"};
  EXPECT_EQ(run["shard"]["timing_phases"], phases);
  EXPECT_EQ(d["sharding_phases"], phases);
  EXPECT_EQ(d["summary"]["cells"][0]["runs_complete"], 1);
}

// A run that changed its worker count (strata scale): each resume on
// another count is marked on its curves at its step.
TEST(ReportTest, ChangesOfTheWorkerCountAreMarked) {
  const std::string dir = FakeRunDir(FreshDir("scaled"), "r1", 0.0);
  auto text = ReadFile(JoinPath(dir, "summary.json"));
  ASSERT_TRUE(text.ok());
  nlohmann::json summary = nlohmann::json::parse(*text);
  summary["membership"] = {
      {{"event", "scale"}, {"from", 2}, {"to", 4}, {"step", 30}},
      {{"event", "resumed"}, {"from", 2}, {"to", 4}, {"step", 30}},
      {{"event", "resumed"}, {"from", 4}, {"to", 3}, {"step", 70}}};
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(dir, "summary.json"), summary.dump()).ok());
  auto data = LoadResults(dir);
  ASSERT_TRUE(data.ok()) << data.status().message();
  const nlohmann::json d = ReportData(*data, Summarize(*data));
  const nlohmann::json expected = {{{"step", 30}, {"from", 2}, {"to", 4}},
                                   {{"step", 70}, {"from", 4}, {"to", 3}}};
  EXPECT_EQ(d["runs"][0]["membership"], expected);
  // A run that never changed has none.
  auto plain = LoadResults(FakeRunDir(FreshDir("plain"), "r1", 0.0));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(
      ReportData(*plain, Summarize(*plain))["runs"][0]["membership"].empty());
}

TEST(ReportTest, BandsSpanTheRunsOfACell) {
  const std::string root = FreshDir("exp");
  auto spec = ExperimentSpec::FromString("repeats = 2\n", "e.toml", ".");
  ASSERT_TRUE(spec.ok());
  auto plan = PlanJson(*spec);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root, "plan.json"), plan->dump()).ok());
  FakeRunDir(JoinPath(root, "runs"), "base_r1", 0.0);
  FakeRunDir(JoinPath(root, "runs"), "base_r2", 1.0);
  auto data = LoadExperiment(root);
  ASSERT_TRUE(data.ok());
  nlohmann::json d = ReportData(*data, Summarize(*data));
  const auto& band = d["bands"][0]["train_loss"];
  EXPECT_EQ(band["runs"], 2);
  ASSERT_FALSE(band["x"].empty());
  EXPECT_DOUBLE_EQ(band["x"][0].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(band["x"].back().get<double>(), 40.0);
  // Runs differ by exactly 1.0 everywhere: lo, mean, hi = v, v + 0.5, v + 1.
  for (size_t i = 0; i < band["x"].size(); ++i) {
    const double lo = band["lo"][i], mean = band["mean"][i], hi = band["hi"][i];
    EXPECT_NEAR(hi - lo, 1.0, 1e-12);
    EXPECT_NEAR(mean - lo, 0.5, 1e-12);
  }
}

TEST(ReportTest, HtmlIsSelfContained) {
  const std::string dir = FakeRunDir(FreshDir("html"), "evil</script><b>", 0.0);
  auto written = WriteReport(dir, "");
  ASSERT_TRUE(written.ok()) << written.status().message();
  auto html = ReadFile(*written);
  ASSERT_TRUE(html.ok());
  EXPECT_EQ(html->find("@STRATA_"), std::string::npos);
  // No external resources.
  EXPECT_EQ(html->find("src=\"http"), std::string::npos);
  EXPECT_EQ(html->find("href=\"http"), std::string::npos);
  // The library is inlined; the run's odd name cannot close the data script.
  EXPECT_NE(html->find("echarts"), std::string::npos);
  EXPECT_GT(html->size(), EchartsJs().size());
  EXPECT_EQ(html->find("evil</script>"), std::string::npos);
  EXPECT_NE(html->find("evil<\\/script>"), std::string::npos);
  EXPECT_FALSE(EchartsVersion().empty());
}

}  // namespace
}  // namespace strata
