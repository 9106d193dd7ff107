#include "experiment/serve.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/fs.h"
#include "experiment/spec.h"
#include "experiment/stats.h"
#include "test_util.h"

namespace strata {
namespace {

using testing_util::EvalLine;
using testing_util::FreshDir;

// A running run whose eval.jsonl ends in a line cut half-way.
std::string RunningRunDir(const std::string& root, int evals) {
  return testing_util::RunningRunDir(root, evals, /*cut_last_line=*/true);
}

void WriteSummary(const std::string& dir, nlohmann::json summary) {
  summary["final_val_acc"] = 0.5;
  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(dir, "summary.json"), summary.dump()).ok());
}

TEST(LiveRunStateTest, FromFilesAndIdleTime) {
  const LiveReportOptions o;  // stalled after 300 s
  const nlohmann::json none;
  EXPECT_EQ(LiveRunState("missing", none, kNaN, o), "pending");
  EXPECT_EQ(LiveRunState("partial", none, 1.0, o), "running");
  EXPECT_EQ(LiveRunState("partial", none, 301.0, o), "stalled");
  // A directory with no file yet has been idle forever.
  EXPECT_EQ(
      LiveRunState("partial", none, std::numeric_limits<double>::infinity(), o),
      "stalled");
  EXPECT_EQ(LiveRunState("complete", {{"interrupted", false}}, 1e9, o), "done");
  EXPECT_EQ(LiveRunState("partial", {{"interrupted", true}}, 1.0, o),
            "interrupted");
  EXPECT_EQ(
      LiveRunState("partial", {{"interrupted", false}, {"error", "x"}}, 1, o),
      "failed");
}

TEST(LiveReportTest, OpenNamesADirectoryThatIsNeitherKind) {
  const std::string root = FreshDir("empty");
  auto r = LiveReport::Open(root);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_NE(r.status().message().find(root), std::string::npos);
  EXPECT_FALSE(LiveReport::Open(JoinPath(root, "nope")).ok());
  LiveReportOptions bad;
  bad.refresh_s = 0;
  EXPECT_EQ(LiveReport::Open(RunningRunDir(root, 1), bad).status().code(),
            Status::Code::kInvalidArgument);
}

TEST(LiveReportTest, ARunGrowsThenIsDone) {
  const std::string dir = RunningRunDir(FreshDir("run"), 2);
  LiveReportOptions o;
  o.refresh_s = 0.5;
  auto report = LiveReport::Open(dir, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  auto first = (*report)->Data();
  ASSERT_TRUE(first.ok()) << first.status().message();
  // The cut last line is skipped, not an error.
  EXPECT_EQ((*first)["runs"][0]["val"]["x"].size(), 2u);
  EXPECT_EQ((*first)["runs"][0]["state"], "running");
  EXPECT_EQ((*first)["summary"]["runs"][0]["state"], "running");
  EXPECT_EQ((*first)["live"]["refresh_ms"], 500);
  EXPECT_EQ((*first)["live"]["states"], nlohmann::json({{"running", 1}}));
  const std::string v1 = (*first)["live"]["version"];

  // Nothing changed: the same version (and the same data).
  auto again = (*report)->Data();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["live"]["version"], v1);
  EXPECT_EQ(*again, *first);

  // The cut line is completed and another evaluation arrives.
  std::string eval = EvalLine(0) + "\n" + EvalLine(10) + "\n" + EvalLine(20) +
                     "\n" + EvalLine(30) + "\n";
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "eval.jsonl"), eval).ok());
  auto grown = (*report)->Data();
  ASSERT_TRUE(grown.ok());
  EXPECT_NE((*grown)["live"]["version"], v1);
  EXPECT_EQ((*grown)["runs"][0]["val"]["x"].size(), 4u);

  WriteSummary(dir, {{"interrupted", false}});
  auto done = (*report)->Data();
  ASSERT_TRUE(done.ok());
  EXPECT_EQ((*done)["runs"][0]["state"], "done");
  EXPECT_EQ((*done)["summary"]["runs"][0]["state"], "done");
  EXPECT_EQ((*done)["summary"]["runs"][0]["final_val_acc"], 0.5);
}

TEST(LiveReportTest, AFailedRunIsFailed) {
  const std::string dir = RunningRunDir(FreshDir("failed"), 1);
  WriteSummary(dir, {{"interrupted", false}, {"error", "worker 1 lost"}});
  auto report = LiveReport::Open(dir);
  ASSERT_TRUE(report.ok());
  auto data = (*report)->Data();
  ASSERT_TRUE(data.ok());
  EXPECT_EQ((*data)["runs"][0]["state"], "failed");
}

TEST(LiveReportTest, ExperimentRunsArePendingRunningOrDone) {
  const std::string root = FreshDir("exp");
  auto spec = ExperimentSpec::FromString("repeats = 3\n", "e.toml", ".");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->runs.size(), 3u);
  auto plan = PlanJson(*spec);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(root, "plan.json"), plan->dump()).ok());
  const std::string runs = JoinPath(root, "runs");
  ASSERT_TRUE(MakeDirs(runs).ok());
  // Run 1 finished, run 2 is going, run 3 has not started.
  testing_util::WriteFakeRun(*spec, spec->runs[0], root,
                             {{"final_val_acc", 0.5}});
  const std::string going = RunningRunDir(runs, 1);
  ASSERT_EQ(
      std::rename(going.c_str(), JoinPath(runs, spec->runs[1].name).c_str()),
      0);
  auto report = LiveReport::Open(root);
  ASSERT_TRUE(report.ok()) << report.status().message();
  auto data = (*report)->Data();
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ((*data)["runs"][0]["state"], "done");
  EXPECT_EQ((*data)["runs"][1]["state"], "running");
  EXPECT_EQ((*data)["runs"][2]["state"], "pending");
  EXPECT_EQ((*data)["live"]["states"],
            nlohmann::json({{"done", 1}, {"running", 1}, {"pending", 1}}));
  EXPECT_EQ((*data)["runs"][1]["val"]["x"].size(), 1u);
}

TEST(LiveReportTest, AnswersThePageTheDataAndNothingElse) {
  const std::string dir = RunningRunDir(FreshDir("http"), 2);
  auto report = LiveReport::Open(dir);
  ASSERT_TRUE(report.ok());
  HttpRequest req;
  req.path = "/";
  HttpResponse page = (*report)->Handle(req);
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("\"live\":{"), std::string::npos);

  req.path = "/data.json";
  HttpResponse data = (*report)->Handle(req);
  EXPECT_EQ(data.status, 200);
  EXPECT_EQ(data.content_type, "application/json");
  nlohmann::json j = nlohmann::json::parse(data.body);
  const std::string version = j["live"]["version"];
  req.query["version"] = version;
  EXPECT_EQ(nlohmann::json::parse((*report)->Handle(req).body),
            nlohmann::json({{"unchanged", true}, {"version", version}}));
  req.query["version"] = "something older";
  EXPECT_EQ(nlohmann::json::parse((*report)->Handle(req).body), j);

  req.path = "/etc/passwd";
  EXPECT_EQ((*report)->Handle(req).status, 404);

  // The directory vanished: 503 with the reason, no crash.
  ASSERT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  req.path = "/data.json";
  HttpResponse gone = (*report)->Handle(req);
  EXPECT_EQ(gone.status, 503);
  EXPECT_NE(gone.body.find(dir), std::string::npos);
}

}  // namespace
}  // namespace strata
