// Loads generated reports in Debian's headless Chromium and checks the page's
// own self-check: every chart drew something and no script error happened.
// Skips (saying why) when Chromium is not installed or cannot start.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/fs.h"
#include "experiment/browser_util.h"
#include "experiment/experiment.h"
#include "experiment/report.h"
#include "experiment/results.h"
#include "experiment/test_util.h"

namespace strata {
namespace {

using testing_util::DumpDom;
using testing_util::SelfCheck;

// Per process: ctest runs each test of the suite as its own process, in
// parallel, and each runs the suite's set-up.
std::string TmpDir(const std::string& name) {
  const char* root = std::getenv("STRATA_TEST_TMP");
  std::string dir =
      JoinPath(root ? root : "/tmp",
               "report_browser_" + name + "_" + std::to_string(::getpid()));
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  EXPECT_TRUE(MakeDirs(dir).ok());
  return dir;
}

// A sharding report as the sharding module writes it, in place of the one
// worker 0 wrote (default mod sharding), so that the two cells' class counts
// and timings differ and every class-count and timing chart is exercised.
void AddShardReport(const std::string& run_dir, int seed) {
  nlohmann::json per_worker = nlohmann::json::array();
  for (int w = 0; w < 2; ++w) {
    nlohmann::json counts = nlohmann::json::array();
    for (int c = 0; c < 10; ++c)
      counts.push_back(30 + (c * 7 + w * 3 + seed) % 11);
    per_worker.push_back(
        {{"worker", w}, {"count", 300}, {"class_counts", counts}});
  }
  nlohmann::json r = {
      {"method", "random"},
      {"num_workers", 2},
      {"seed", seed},
      {"num_examples", 600},
      {"num_classes", 10},
      {"per_worker", per_worker},
      {"tv_distance",
       {{"per_worker", {0.01, 0.02}}, {"max", 0.02}, {"mean", 0.015}}},
      {"broadcast_size", 0},
      {"timings_s",
       {{"load", 0.01},
        {"pca", 0.0},
        {"kmeans", 0.0},
        {"assign", 0.002},
        {"total", 0.013}}}};
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(run_dir, "shard_report.json"), r.dump()).ok());
}

class ReportBrowserTest : public ::testing::Test {
 protected:
  // Small real runs: 2 cells x 2 repeats of a 2-worker synthetic cluster.
  static void SetUpTestSuite() {
    dir_ = new std::string(TmpDir("exp"));
    const std::string file = JoinPath(*dir_, "exp.toml");
    ASSERT_TRUE(
        WriteFileAtomic(
            file, "output = \"" + JoinPath(*dir_, "out") + R"("
repeats = 2
baseline = "mode-async")" +
                      testing_util::TinyTwoModeBody(30,
                                                    "train.log_every = 5\n"
                                                    "eval.every_s = 0.02\n"))
            .ok());
    ExperimentOptions o;
    o.spec_path = file;
    o.exe = STRATA_BINARY;
    o.write_report = false;
    auto code = RunExperiment(o);
    ASSERT_TRUE(code.ok()) << code.status().message();
    ASSERT_EQ(*code, 0);
  }
  static void TearDownTestSuite() {
    if (std::system(("rm -rf '" + *dir_ + "'").c_str()) != 0) {
      std::fprintf(stderr, "could not remove %s\n", dir_->c_str());
    }
    delete dir_;
  }
  static std::string* dir_;
};
std::string* ReportBrowserTest::dir_ = nullptr;

TEST_F(ReportBrowserTest, EveryChartOfAnExperimentReportDraws) {
  const std::string out = JoinPath(*dir_, "out");
  for (const char* r :
       {"mode-sync_r1", "mode-async_r1", "mode-sync_r2", "mode-async_r2"})
    AddShardReport(JoinPath(out, std::string("runs/") + r),
                   r[5] == 's' ? 1 : 2);
  auto html = WriteReport(out, "");
  ASSERT_TRUE(html.ok()) << html.status().message();
  std::string why;
  const std::string dom = DumpDom(*html, &why);
  if (dom.empty()) GTEST_SKIP() << why;
  nlohmann::json check = SelfCheck(dom);
  ASSERT_TRUE(check.is_object()) << "no self-check in the page";
  EXPECT_EQ(check["status"], "done");
  EXPECT_TRUE(check["errors"].empty()) << check["errors"].dump();
  EXPECT_TRUE(check["failed"].empty()) << check.dump();
  // 4 curves + 2 cells x 2 runs of class counts + sharding time + staleness.
  EXPECT_EQ(check["charts"], 10) << check.dump();
  EXPECT_EQ(check["drawn"], 10);
  EXPECT_GE(check["tables"].get<int>(), 4);
  for (const auto& r : check["results"])
    EXPECT_GT(r["points"].get<int>(), 0) << r.dump();
}

// A run's report drew without a script error or a failed chart, and at
// least its 4 curves and the staleness chart (+ shards).
void ExpectARunsChartsDrawn(const nlohmann::json& check) {
  ASSERT_TRUE(check.is_object());
  EXPECT_TRUE(check["errors"].empty()) << check["errors"].dump();
  EXPECT_TRUE(check["failed"].empty()) << check.dump();
  EXPECT_GE(check["charts"].get<int>(), 5);
}

TEST_F(ReportBrowserTest, RunReportDraws) {
  const std::string run = JoinPath(*dir_, "out/runs/mode-async_r1");
  auto html = WriteReport(run, JoinPath(*dir_, "run.html"));
  ASSERT_TRUE(html.ok()) << html.status().message();
  std::string why;
  const std::string dom = DumpDom(*html, &why);
  if (dom.empty()) GTEST_SKIP() << why;
  nlohmann::json check = SelfCheck(dom);
  ASSERT_NO_FATAL_FAILURE(ExpectARunsChartsDrawn(check));
  // Only `strata serve` makes a page live.
  EXPECT_FALSE(check.contains("live")) << check.dump();
  EXPECT_EQ(dom.find("id=\"live-status\""), std::string::npos);
}

// A run whose worker count changed (strata scale): its curves carry a
// mark at each change, and every chart still draws without a script error.
TEST_F(ReportBrowserTest, ARunWithChangesOfWorkerCountDraws) {
  const std::string copy = JoinPath(*dir_, "scaled");
  ASSERT_EQ(std::system(("rm -rf '" + copy + "' && cp -r '" +
                         JoinPath(*dir_, "out/runs/mode-async_r1") + "' '" +
                         copy + "'")
                            .c_str()),
            0);
  const std::string path = JoinPath(copy, "summary.json");
  nlohmann::json summary = nlohmann::json::parse(*ReadFile(path));
  summary["membership"] = {
      {{"event", "resumed"}, {"from", 2}, {"to", 4}, {"step", 10}}};
  ASSERT_TRUE(WriteFileAtomic(path, summary.dump()).ok());
  auto html = WriteReport(copy, JoinPath(*dir_, "scaled.html"));
  ASSERT_TRUE(html.ok()) << html.status().message();
  std::string why;
  const std::string dom = DumpDom(*html, &why);
  if (dom.empty()) GTEST_SKIP() << why;
  ExpectARunsChartsDrawn(SelfCheck(dom));
}

// With a target accuracy, the report adds validation accuracy against wall
// time, each cell's runs and band, with the target drawn across.
TEST_F(ReportBrowserTest, ATargetAccuracyAddsTheWallTimeChart) {
  const std::string copy = JoinPath(*dir_, "target");
  ASSERT_EQ(std::system(("rm -rf '" + copy + "' && cp -r '" +
                         JoinPath(*dir_, "out") + "' '" + copy + "'")
                            .c_str()),
            0);
  const std::string plan_path = JoinPath(copy, "plan.json");
  nlohmann::json plan = nlohmann::json::parse(*ReadFile(plan_path));
  plan["target_accuracy"] = 0.3;
  ASSERT_TRUE(WriteFileAtomic(plan_path, plan.dump()).ok());
  auto html = WriteReport(copy, "");
  ASSERT_TRUE(html.ok()) << html.status().message();
  std::string why;
  const std::string dom = DumpDom(*html, &why);
  if (dom.empty()) GTEST_SKIP() << why;
  nlohmann::json check = SelfCheck(dom);
  ASSERT_TRUE(check.is_object());
  EXPECT_TRUE(check["errors"].empty()) << check["errors"].dump();
  EXPECT_TRUE(check["failed"].empty()) << check.dump();
  EXPECT_EQ(check["charts"], 11) << check.dump();  // the 10 above + this one
  EXPECT_GT(testing_util::ChartPoints(check, "curve-val_acc_wall"), 0)
      << check.dump();
}

// The control: the self-check does notice a script error.
TEST_F(ReportBrowserTest, SelfCheckCatchesScriptErrors) {
  const std::string out = JoinPath(*dir_, "out");
  auto html_path = WriteReport(out, JoinPath(*dir_, "broken.html"));
  ASSERT_TRUE(html_path.ok());
  std::string html = *ReadFile(*html_path);
  const size_t body = html.find("<body>");
  ASSERT_NE(body, std::string::npos);
  html.insert(body + 6, "<script>undefinedFunctionOfTheTest();</script>");
  ASSERT_TRUE(WriteFileAtomic(*html_path, html).ok());
  std::string why;
  const std::string dom = DumpDom(*html_path, &why);
  if (dom.empty()) GTEST_SKIP() << why;
  nlohmann::json check = SelfCheck(dom);
  ASSERT_TRUE(check.is_object());
  ASSERT_FALSE(check["errors"].empty());
  EXPECT_NE(
      check["errors"][0].get<std::string>().find("undefinedFunctionOfTheTest"),
      std::string::npos);
  EXPECT_NE(dom.find("data-ok=\"false\""), std::string::npos);
}

}  // namespace
}  // namespace strata
