// One timeline of the whole cluster (cluster.timeline): the Chrome trace,
// the straggler table, and whole runs that write them.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "data/load.h"
#include "launch/cluster_test_util.h"
#include "launch/threads.h"
#include "run/stragglers.h"
#include "run/timeline_trace.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

timeline::Event Ev(const char* name, int64_t start, int64_t dur, bool async,
                   int32_t node) {
  timeline::Event e;
  e.name = name;
  e.cat = "test";
  e.track = "main";
  e.start_ns = start;
  e.dur_ns = dur;
  e.async = async;
  e.node = node;
  return e;
}

TEST(ChromeTraceTest, NodesOnTheCoordinatorsClockWithNamesAndAsyncPairs) {
  timeline::NodeTimeline a, b;
  a.node = 0;
  a.taken.events = {Ev("step", 5000, 2000, false, 0)};
  b.node = 3;
  b.clock.offset_ns = 1000;  // its clock is 1 us behind the coordinator's
  b.clock.rtt_ns = 40;
  b.taken.events = {Ev("push", 3000, 500, true, 3)};
  const nlohmann::json t = ChromeTrace(
      {a, b}, [](int32_t id) { return "node " + std::to_string(id); });
  std::map<std::string, nlohmann::json> by_ph;
  int names = 0;
  for (const auto& e : t.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") ++names;
    if (e.at("ph") != "M") by_ph[e.at("ph").get<std::string>()] = e;
  }
  EXPECT_EQ(names, 2);
  // The earliest span (node 3's push at 3000 + 1000) is time 0.
  EXPECT_DOUBLE_EQ(by_ph.at("b").at("ts").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(by_ph.at("e").at("ts").get<double>(), 0.5);
  EXPECT_EQ(by_ph.at("b").at("id2"), by_ph.at("e").at("id2"));
  EXPECT_EQ(by_ph.at("b").at("pid"), 3);
  EXPECT_DOUBLE_EQ(by_ph.at("X").at("ts").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(by_ph.at("X").at("dur").get<double>(), 2.0);
  EXPECT_EQ(t.at("otherData").at("clocks").at("node 3").at("offset_ns"), 1000);
}

TEST(StepHistogramTest, QuantilesWithinTheBucketWidth) {
  StepHistogram h;
  for (int i = 1; i <= 1000; ++i) h.Add(i * 1e-3);  // 1 ms .. 1 s, uniform
  EXPECT_NEAR(h.Quantile(0.5), 0.5, 0.5 * 0.025);
  EXPECT_NEAR(h.Quantile(0.9), 0.9, 0.9 * 0.025);
  EXPECT_NEAR(h.Quantile(0.99), 0.99, 0.99 * 0.025);
  const StepHistogram back = StepHistogram::FromJson(h.ToJson());
  EXPECT_EQ(back.count(), 1000);
  EXPECT_DOUBLE_EQ(back.Quantile(0.9), h.Quantile(0.9));
  EXPECT_EQ(StepHistogram().Quantile(0.5), 0.0);
}

TEST(StragglerTableTest, WaitingIsTheExchangeBeyondTheLeast) {
  std::vector<std::optional<WorkerMetrics>> w(3);
  w[0].emplace();
  w[0]->index = 0;
  w[0]->iterations = 10;
  w[0]->compute_s = 1;
  w[0]->comm_s = 3;  // waited 2 s for worker 1
  w[1].emplace();
  w[1]->index = 1;
  w[1]->iterations = 10;
  w[1]->compute_s = 3;
  w[1]->comm_s = 1;
  w[1]->paced = true;
  w[1]->speed = 0.33;
  // w[2]: lost, left out
  const auto rows = StragglerTable(w);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].waiting_share, 0.5);
  EXPECT_DOUBLE_EQ(rows[1].waiting_share, 0.0);
  EXPECT_DOUBLE_EQ(rows[1].speed, 0.33);
  EXPECT_NE(FormatStragglers(rows).find("50.0%"), std::string::npos);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

// The spans of `pid` by name: X slices and async begins.
std::map<std::string, int> SpansOf(const nlohmann::json& trace, int pid) {
  std::map<std::string, int> n;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("pid") != pid) continue;
    const std::string ph = e.at("ph");
    if (ph == "X" || ph == "b") ++n[e.at("name").get<std::string>()];
  }
  return n;
}

TEST(TimelineRunTest, ASyncRunWritesEveryNodesSpans) {
  const std::string root = TempRoot();
  // Nodes: coordinator 0, servers 1-2, workers 3-4, evaluator 5.
  auto got = RunConfig(
      With(Base(root), {"cluster.mode=sync", "cluster.workers=2",
                        "cluster.timeline=true", "net.latency_ms=0.2"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const std::string dir = testing_util::NewestRunDir(root);
  const nlohmann::json trace = ReadJson(dir + "/timeline.json");
  ASSERT_TRUE(trace.is_object()) << "no timeline.json in " << dir;
  for (int worker : {3, 4}) {
    const auto n = SpansOf(trace, worker);
    EXPECT_EQ(n.count("step") ? n.at("step") : 0, 20) << worker;
    for (const char* name : {"batch", "forward", "backward", "after_step",
                             "push", "barrier", "on the wire"})
      EXPECT_GT(n.count(name) ? n.at(name) : 0, 0) << worker << " " << name;
  }
  for (int server : {1, 2})
    EXPECT_GT(SpansOf(trace, server)["handle push"], 0) << server;
  EXPECT_GT(SpansOf(trace, 5)["evaluate"], 0);  // the evaluator's
  EXPECT_EQ(trace.at("otherData").at("clocks").size(), 6u);
  // The straggler table, in every summary.
  const nlohmann::json summary = ReadJson(dir + "/summary.json");
  ASSERT_EQ(summary.at("stragglers").size(), 2u);
  for (const auto& row : summary.at("stragglers")) {
    EXPECT_GT(row.at("step_p50_s").get<double>(), 0.0);
    EXPECT_GE(row.at("step_p99_s").get<double>(),
              row.at("step_p50_s").get<double>());
  }
}

TEST(TimelineRunTest, TheDataServersServingIsOnIt) {
  const std::string root = TempRoot();
  // Nodes: coordinator 0, servers 1-2, workers 3-4, evaluator 5, data
  // server 6.
  auto got = RunConfig(
      With(Base(root), {"cluster.mode=async", "cluster.workers=2",
                        "cluster.data_servers=1", "cluster.timeline=true"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const nlohmann::json trace =
      ReadJson(testing_util::NewestRunDir(root) + "/timeline.json");
  ASSERT_TRUE(trace.is_object());
  EXPECT_GT(SpansOf(trace, 6)["serve batch"], 0);
  EXPECT_GT(SpansOf(trace, 3)["batch_request"], 0);  // the worker's request
}

TEST(TimelineRunTest, OffByDefault) {
  const std::string root = TempRoot();
  auto got = RunConfig(With(Base(root), {"cluster.mode=async"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(testing_util::NewestRunDir(root) +
                                       "/timeline.json"));
}

TEST(TimelineRunTest, AStoppedRunStillWritesIt) {
  const std::string root = TempRoot();
  Config c =
      With(Base(root), {"cluster.mode=sync", "cluster.workers=2",
                        "train.iterations=200000", "cluster.timeline=true"});
  auto data = LoadDatasetFromConfig(c);
  ASSERT_TRUE(data.ok());
  auto dir = RunDirectory::Create(c);
  ASSERT_TRUE(dir.ok());
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    stop = true;
  });
  auto got = TrainCluster(c, *data, *dir, &stop);
  stopper.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->interrupted);
  const nlohmann::json trace = ReadJson(dir->path() + "/timeline.json");
  ASSERT_TRUE(trace.is_object());
  EXPECT_GT(SpansOf(trace, 3)["step"], 0);
  EXPECT_LT(SpansOf(trace, 3)["step"], 200000);
}

}  // namespace
}  // namespace strata
