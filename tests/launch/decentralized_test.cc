// The decentralized modes against the oracles of issue 10: all-reduce equals
// single-process SGD with batch n x WB, ring equals all-reduce, local SGD
// with tau = 1 and plain SGD equals all-reduce; gossip keeps the sum of the
// weights at 1.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/fs.h"
#include "data/load.h"
#include "launch/cluster_test_util.h"
#include "launch/threads.h"
#include "worker/local_trainer.h"

namespace strata {
namespace {

using testing_util::Base;
using testing_util::MaxAbsDiff;
using testing_util::RunConfig;
using testing_util::TempRoot;
using testing_util::With;

struct EqCase {
  std::string transport;
  int workers;
};

void PrintTo(const EqCase& c, std::ostream* os) {
  *os << c.transport << "_" << c.workers;
}

class AllReduceEqualsLocalTest : public ::testing::TestWithParam<EqCase> {};

TEST_P(AllReduceEqualsLocalTest, SameParametersAsSingleProcessSgd) {
  const std::string root = TempRoot();
  auto expected = RunConfig(Base(root));
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  auto got = RunConfig(With(
      Base(root),
      {"cluster.mode=allreduce", "cluster.transport=" + GetParam().transport,
       "cluster.workers=" + std::to_string(GetParam().workers)}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_FALSE(expected->final_params.empty());
  EXPECT_GT(MaxAbsDiff(expected->final_params,
                       std::vector<float>(expected->final_params.size(), 0.0f)),
            0.0);
  EXPECT_LT(MaxAbsDiff(expected->final_params, got->final_params), 1e-4);
  EXPECT_NEAR(expected->final_train_loss, got->final_train_loss, 1e-4);
  EXPECT_EQ(got->samples, 20 * 32);
}

INSTANTIATE_TEST_SUITE_P(
    All, AllReduceEqualsLocalTest,
    ::testing::Values(EqCase{"inproc", 1}, EqCase{"inproc", 2},
                      EqCase{"inproc", 4}, EqCase{"tcp", 1}, EqCase{"tcp", 2},
                      EqCase{"tcp", 4}),
    [](const auto& info) {
      return info.param.transport + "_" + std::to_string(info.param.workers);
    });

TEST(DecentralizedTest, AllReduceBucketsAndOverlapDoNotChangeTheResult) {
  // Over Gloo (through memory there are no buckets to overlap).
  // Tiny buckets (the mlp here has 16 x 16 + 16 + 16 x 10 + 10 = 442
  // floats: 0.0005 MiB is 131 floats, 4 buckets, parameters split across
  // them), reduced during the backward pass or after it.
  const std::string root = TempRoot();
  auto expected = RunConfig(Base(root));
  ASSERT_TRUE(expected.ok());
  for (const char* overlap : {"true", "false"}) {
    auto got = RunConfig(
        With(Base(root), {"cluster.mode=allreduce", "cluster.workers=4",
                          "cluster.collective=gloo", "cluster.bucket_mb=0.0005",
                          std::string("cluster.bucket_overlap=") + overlap}));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_LT(MaxAbsDiff(expected->final_params, got->final_params), 1e-4)
        << "overlap " << overlap;
  }
}

// Workers that are threads of one process reduce through memory
// (cluster.collective = auto); Gloo over TCP (gloo) and the sync parameter
// server compute the same update, up to the rounding of their sums.
TEST(DecentralizedTest, MemoryCollectivesEqualGlooAndTheSyncServer) {
  const std::string root = TempRoot();
  const Config four = With(Base(root), {"cluster.workers=4"});
  auto memory =
      RunConfig(With(four, {"cluster.mode=allreduce", "run.name=memory"}));
  auto gloo =
      RunConfig(With(four, {"cluster.mode=allreduce", "cluster.collective=gloo",
                            "run.name=gloo"}));
  auto sync = RunConfig(With(four, {"cluster.mode=sync"}));
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(gloo.ok()) << gloo.status().ToString();
  ASSERT_TRUE(sync.ok()) << sync.status().ToString();
  ASSERT_FALSE(memory->final_params.empty());
  for (const auto& [name, backend] :
       {std::pair{"memory", "memory"}, std::pair{"gloo", "gloo"}}) {
    auto text = ReadFile(root + "/" + name + "/summary.json");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    for (const auto& w : nlohmann::json::parse(*text)["workers"])
      EXPECT_EQ(w.value("collective", ""), backend) << w.dump();
  }
  EXPECT_LT(MaxAbsDiff(memory->final_params, gloo->final_params), 1e-5);
  EXPECT_LT(MaxAbsDiff(memory->final_params, sync->final_params), 1e-5);
}

TEST(DecentralizedTest, RingEqualsAllReduce) {
  const std::string root = TempRoot();
  // 4 workers: 32 / 4 examples each; the parameter count does not divide
  // evenly by 4 (uneven slices are exercised).
  auto all = RunConfig(
      With(Base(root), {"cluster.mode=allreduce", "cluster.workers=4"}));
  auto ring =
      RunConfig(With(Base(root), {"cluster.mode=ring", "cluster.workers=4"}));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_LT(MaxAbsDiff(all->final_params, ring->final_params), 1e-5);
}

TEST(DecentralizedTest, LocalSgdWithTauOneEqualsAllReduce) {
  const std::string root = TempRoot();
  // Plain SGD: averaging the models after one step each is averaging the
  // gradients.
  auto all =
      RunConfig(With(Base(root), {"cluster.mode=allreduce", "cluster.workers=4",
                                  "train.momentum=0"}));
  auto avg = RunConfig(
      With(Base(root), {"cluster.mode=local-sgd", "cluster.workers=4",
                        "cluster.average_every=1", "train.momentum=0"}));
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_TRUE(avg.ok()) << avg.status().ToString();
  EXPECT_LT(MaxAbsDiff(all->final_params, avg->final_params), 1e-5);
  // Control: averaging every 4 steps is a different algorithm.
  auto tau4 = RunConfig(
      With(Base(root), {"cluster.mode=local-sgd", "cluster.workers=4",
                        "cluster.average_every=4", "train.momentum=0"}));
  ASSERT_TRUE(tau4.ok()) << tau4.status().ToString();
  EXPECT_GT(MaxAbsDiff(all->final_params, tau4->final_params), 1e-4);
}

nlohmann::json NewestSummary(const std::string& root) {
  std::ifstream in(testing_util::NewestRunDir(root) + "/summary.json");
  return nlohmann::json::parse(in);
}

TEST(DecentralizedTest, GossipKeepsTheWeightsSumAtOne) {
  const std::string root = TempRoot();
  auto got = RunConfig(
      With(Base(root), {"cluster.mode=gossip", "cluster.workers=4",
                        "cluster.gossip_p=0.7", "train.iterations=40"}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const nlohmann::json s = NewestSummary(root);
  EXPECT_NEAR(s.at("gossip_weight_total").get<double>(), 1.0, 1e-5);
  int64_t pushes = 0;
  for (const auto& w : s.at("workers")) {
    pushes += w.at("exchanges").get<int64_t>();
    EXPECT_GT(w.at("gossip_weight").get<double>(), 0.0);
  }
  EXPECT_GT(pushes, 0);  // the weights did move
  EXPECT_TRUE(s.contains("final_consensus_distance"));
}

TEST(DecentralizedTest, EveryModeTrains) {
  const std::string root = TempRoot();
  auto local = RunConfig(Base(root));
  ASSERT_TRUE(local.ok());
  for (const char* mode :
       {"dpsgd", "gossip", "easgd", "local-sgd", "tree-easgd"}) {
    // Gossip's pushes land when the threads' timing lets them, so its final
    // model varies from run to run: at 60 steps its train accuracy ranged
    // 0.19-0.42 here (under load, below the bar about once in 15 runs), at
    // 120 steps 0.20-0.45 (CI once saw 0.195), at 300 steps 0.40-0.50 in 32
    // runs, half of them beside two busy loops.
    const bool gossip = std::string(mode) == "gossip";
    auto got = RunConfig(With(
        Base(root), {std::string("cluster.mode=") + mode, "cluster.workers=4",
                     gossip ? "train.iterations=300" : "train.iterations=60"}));
    ASSERT_TRUE(got.ok()) << mode << ": " << got.status().ToString();
    // Twice chance on 10 classes, and the model moved.
    EXPECT_GT(got->final_train_acc, 0.2) << mode;
    EXPECT_GT(MaxAbsDiff(got->final_params, local->final_params), 1e-4) << mode;
  }
}

// Ctrl-C in the middle of a collective or neighbour run: every worker
// stops (at slightly different steps), the final evaluation still averages
// the workers' models, and nothing waits out a timeout.
TEST(DecentralizedTest, AStopMidRunEndsCleanlyAndStillEvaluates) {
  const std::string root = TempRoot();
  for (const char* mode : {"allreduce", "dpsgd", "ring"}) {
    Config c = With(Base(root), {std::string("cluster.mode=") + mode,
                                 "cluster.workers=4", "train.iterations=200000",
                                 "cluster.request_timeout_ms=20000"});
    auto data = LoadDatasetFromConfig(c);
    ASSERT_TRUE(data.ok());
    auto dir = RunDirectory::Create(c);
    ASSERT_TRUE(dir.ok());
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      stop = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto got = TrainCluster(c, *data, *dir, &stop);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    stopper.join();
    ASSERT_TRUE(got.ok()) << mode << ": " << got.status().ToString();
    EXPECT_TRUE(got->interrupted) << mode;
    EXPECT_LT(got->steps, 200000) << mode;
    EXPECT_GT(got->final_val_acc, 0.2) << mode;  // evaluated, not zeros
    EXPECT_FALSE(got->final_params.empty()) << mode;
    EXPECT_LT(secs, 15.0) << mode;
  }
}

TEST(DecentralizedTest, UnknownModeIsNamed) {
  Config c;
  Status st = c.ApplyOverride("cluster.mode=hogwild");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gossip"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace strata
