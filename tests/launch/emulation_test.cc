// The emulated cluster (net.*, workers.*): the options as a user writes
// them, the worker's pacing, and whole runs with both on.
#include "run/emulation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/cluster_test_util.h"
#include "worker/pace.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

// A default config with `kvs` applied.
Config Net(std::initializer_list<std::string> kvs) {
  return With(Config(), kvs);
}

// coordinator 0, servers 1-2, workers 3-6, evaluator 7, data 8.
RoleTable Roles() { return RoleTable::Standard(2, 4, true, 1); }

TEST(LinksFromConfigTest, OffByDefault) {
  auto links = LinksFromConfig(Config(), Roles());
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  EXPECT_FALSE(*links);
  EXPECT_EQ(DescribeLinks(Config()), "");
}

TEST(LinksFromConfigTest, ClassesNodesAndPairs) {
  const Config c = Net({"net.bandwidth_bps=1e9", "net.latency_ms=0.5",
                        "net.worker_worker.bandwidth_bps=1e10",
                        "net.worker_data.latency_ms=2",
                        "net.nodes=worker3: bandwidth_bps=1e8 latency_ms=20; "
                        "worker0-server1: jitter_ms=1"});
  auto links = LinksFromConfig(c, Roles());
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  const LinkLookup& l = *links;
  const RoleTable r = Roles();
  const NodeId s0 = r.ServerId(0), s1 = r.ServerId(1), w0 = r.WorkerId(0),
               w1 = r.WorkerId(1), w3 = r.WorkerId(3), d0 = r.DataServerId(0);
  EXPECT_EQ(l(w1, s0), (LinkSpec{1e9, 500000, 0}));
  EXPECT_EQ(l(s0, w1), (LinkSpec{1e9, 500000, 0}));
  EXPECT_EQ(l(w0, w1), (LinkSpec{1e10, 500000, 0}));
  EXPECT_EQ(l(d0, w1), (LinkSpec{1e9, 2000000, 0}));
  EXPECT_EQ(l(0, s0), (LinkSpec{1e9, 500000, 0}));  // coordinator: net.*
  // worker3 slows every link it is on, both ways.
  EXPECT_EQ(l(w3, s0), (LinkSpec{1e8, 20000000, 0}));
  EXPECT_EQ(l(w0, w3), (LinkSpec{1e8, 20000000, 0}));
  // One pair's jitter, both ways, and no other's.
  EXPECT_EQ(l(w0, s1), (LinkSpec{1e9, 500000, 1000000}));
  EXPECT_EQ(l(s1, w0), (LinkSpec{1e9, 500000, 1000000}));
  EXPECT_EQ(l(w0, s0), (LinkSpec{1e9, 500000, 0}));
  // A node outside the table (added later) is not shaped.
  EXPECT_FALSE(l(w0, 99).shaped());
  EXPECT_NE(DescribeLinks(c).find("worker_worker 1e+10 bit/s"),
            std::string::npos)
      << DescribeLinks(c);
}

TEST(LinksFromConfigTest, MalformedOverridesAreNamed) {
  for (const auto& [text, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"worker9: latency_ms=1", "no worker9"},
           {"worker0 latency_ms=1", "no ':'"},
           {"worker0: latency=1", "unknown link field 'latency'"},
           {"worker0: latency_ms=abc", "not KEY=NUMBER"},
           {"rack0: latency_ms=1", "unknown role 'rack'"},
           {"worker0: latency_ms=-1", "negative"}}) {
    auto links = LinksFromConfig(Net({"net.nodes=" + text}), Roles());
    ASSERT_FALSE(links.ok()) << text;
    EXPECT_EQ(links.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(links.status().message().find(says), std::string::npos)
        << links.status().ToString();
    EXPECT_NE(links.status().message().find("net.nodes"), std::string::npos)
        << links.status().ToString();
  }
}

TEST(WorkerPaceOptionsTest, ListsAndDistributions) {
  auto list =
      WorkerPaceOptions::FromConfig(Net({"workers.speed=1,1,0.5,0.25"}), 4);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->speed, (std::vector<double>{1, 1, 0.5, 0.25}));
  EXPECT_TRUE(list->on());
  EXPECT_EQ(list->SpeedOf(3), 0.25);
  EXPECT_FALSE(WorkerPaceOptions::FromConfig(Config(), 4)->on());

  auto wrong = WorkerPaceOptions::FromConfig(Net({"workers.speed=1,0.5"}), 4);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(
      wrong.status().message().find("lists 2 factors for cluster.workers = 4"),
      std::string::npos)
      << wrong.status().ToString();
  EXPECT_FALSE(
      WorkerPaceOptions::FromConfig(Net({"workers.speed=1,0"}), 2).ok());
  EXPECT_FALSE(
      WorkerPaceOptions::FromConfig(Net({"workers.speed=pareto:1"}), 2).ok());

  const Config drawn = Net({"workers.speed=uniform:0.25,1", "workers.seed=5"});
  auto a = WorkerPaceOptions::FromConfig(drawn, 8);
  auto b = WorkerPaceOptions::FromConfig(drawn, 8);
  auto other = WorkerPaceOptions::FromConfig(
      Net({"workers.speed=uniform:0.25,1", "workers.seed=6"}), 8);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_EQ(a->speed.size(), 8u);
  EXPECT_EQ(a->speed, b->speed);
  EXPECT_NE(a->speed, other->speed);
  for (double s : a->speed) {
    EXPECT_GE(s, 0.25);
    EXPECT_LE(s, 1.0);
  }
}

TEST(WorkerPaceTest, ScalesTheMeasuredComputeTime) {
  WorkerPaceOptions o;
  o.speed = {1, 0.25};
  EXPECT_EQ(WorkerPace(o, 0).ExtraSeconds(3, 0.1), 0.0);
  EXPECT_DOUBLE_EQ(WorkerPace(o, 1).ExtraSeconds(3, 0.1), 0.3);
  // Faster than this machine is not possible: nothing is taken away.
  o.speed = {2, 1};
  EXPECT_EQ(WorkerPace(o, 0).ExtraSeconds(3, 0.1), 0.0);
}

TEST(WorkerPaceTest, StragglersAndNoiseFollowTheSeed) {
  WorkerPaceOptions o;
  o.straggler_probability = 0.3;
  o.straggler_ms = 50;
  o.seed = 11;
  const WorkerPace pace(o, 2);
  int paused = 0;
  for (int64_t it = 0; it < 10000; ++it) {
    const double extra = pace.ExtraSeconds(it, 0.01);
    EXPECT_TRUE(extra == 0.0 || extra == 0.05) << extra;
    paused += extra > 0;
    // The same step of the same worker draws the same.
    EXPECT_EQ(extra, WorkerPace(o, 2).ExtraSeconds(it, 0.01));
  }
  EXPECT_NEAR(paused / 10000.0, 0.3, 0.02);
  // Lognormal noise around half speed: the median step takes twice its
  // compute (extra = compute), and the steps differ.
  WorkerPaceOptions n;
  n.speed = {0.5};
  n.noise_sigma = 0.5;
  const WorkerPace noisy(n, 0);
  std::vector<double> extras;
  for (int64_t it = 0; it < 4001; ++it)
    extras.push_back(noisy.ExtraSeconds(it, 1.0));
  std::sort(extras.begin(), extras.end());
  EXPECT_NEAR(extras[2000], 1.0, 0.1);
  EXPECT_GT(extras.back(), 2.0);
}

nlohmann::json SummaryIn(const std::string& root) {
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    std::ifstream in(e.path() / "summary.json");
    if (in) return nlohmann::json::parse(in);
  }
  return {};
}

// The links and the pacing only delay: a sync run ends with the
// parameters of the same run without them, in threads over the in-process
// transport and over ZeroMQ TCP, and for the collectives.
// Links too slow for a node's registration: the loss says the links may
// be why (a registration crosses them too), rather than blaming the node
// alone. The join timeout is cut to 2 s for the test.
TEST(EmulatedRunTest, ANodeThatNeverRegisteredNamesTheEmulatedLinks) {
  const std::string root = TempRoot();
  auto run = RunConfig(
      With(Base(root),
           {"cluster.mode=sync", "cluster.workers=2", "net.bandwidth_bps=1",
            "cluster.request_timeout_ms=2000", "run.name=slow"}));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("never registered"), std::string::npos)
      << run.status().message();
  EXPECT_NE(run.status().message().find("emulated links are on"),
            std::string::npos)
      << run.status().message();
  EXPECT_NE(run.status().message().find("1 bit/s"), std::string::npos)
      << run.status().message();
}

TEST(EmulatedRunTest, DelaysChangeNoResult) {
  for (const std::vector<std::string>& setup :
       std::vector<std::vector<std::string>>{
           {"cluster.mode=sync", "cluster.transport=inproc"},
           {"cluster.mode=sync", "cluster.transport=tcp"},
           {"cluster.mode=allreduce"}}) {
    SCOPED_TRACE(setup[0] + " " + setup.back());
    Config c = With(Base(TempRoot()), {"cluster.workers=2"});
    for (const std::string& kv : setup) ASSERT_TRUE(c.ApplyOverride(kv).ok());
    auto plain = RunConfig(c);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    const std::string root = TempRoot();
    ASSERT_TRUE(c.ApplyOverride("run.dir=" + root).ok());
    auto emulated =
        RunConfig(With(c, {"net.bandwidth_bps=1e9", "net.latency_ms=0.3",
                           "net.jitter_ms=0.1", "workers.speed=1,0.5"}));
    ASSERT_TRUE(emulated.ok()) << emulated.status().ToString();
    ASSERT_FALSE(plain->final_params.empty());
    EXPECT_EQ(plain->final_params, emulated->final_params);
    const nlohmann::json s = SummaryIn(root);
    ASSERT_EQ(s["workers"].size(), 2u) << s.dump();
    EXPECT_EQ(s["workers"][0]["speed"], 1.0);
    EXPECT_EQ(s["workers"][0]["paced_s"], 0.0);
    EXPECT_EQ(s["workers"][1]["speed"], 0.5);
    EXPECT_GT(s["workers"][1]["paced_s"].get<double>(), 0.0);
  }
}

}  // namespace
}  // namespace strata
