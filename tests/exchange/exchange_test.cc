// The decentralized exchange strategies alone: n workers as threads with a
// coordinator over the in-process transport, learning rate 0 and models
// that start apart, so what moves the models is the exchange alone.
#include "exchange/exchange.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "cluster/mailbox.h"
#include "cluster/node.h"
#include "coordinator/coordinator.h"
#include "coordinator/inproc_coordinator.h"
#include "transport/inproc/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using Models = std::vector<std::vector<float>>;

struct PeerResult {
  Models models;
  std::vector<float> weights;  // gossip
  std::vector<WorkerMetrics> metrics;
};

// Runs `steps` steps of `mode` with zero gradients from `init`.
// `step_ms` paces the steps (gossip mixes what arrived between steps).
PeerResult RunPeers(RunMode mode, const Models& init, int64_t steps,
                    Topology topology = Topology::kRing, double p = 1.0,
                    int step_ms = 0, int64_t tau_up = 1, int64_t tau_down = 1) {
  const int n = static_cast<int>(init.size());
  ClusterRunOptions o;
  o.mode = mode;
  o.roles = RoleTable::Standard(/*servers=*/0, n, /*evaluator=*/false);
  o.request_timeout = milliseconds(10000);
  o.heartbeat_timeout = milliseconds(5000);
  o.topology = topology;
  o.gossip_p = p;
  o.tau_up = tau_up;
  o.tau_down = tau_down;
  o.elastic_alpha = 0.25;
  o.seed = 7;
  InProcFabric fabric;
  CoordinatorOptions co;
  co.roles = o.roles;
  co.heartbeat_timeout = milliseconds(10000);
  auto coordinator_ptr = StartInProcCoordinator(fabric, co);
  Coordinator& coordinator = *coordinator_ptr;

  PeerResult result;
  result.models = init;
  result.weights.assign(n, 0.0f);
  result.metrics.resize(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      auto t = fabric.NewTransport(o.roles.WorkerId(w));
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE((*t)->Bind("inproc://*").ok());
      Mailbox mailbox;
      Node node(std::move(*t), o.roles, milliseconds(100), o.heartbeat_timeout);
      for (MessageType type :
           {MessageType::kPeerModel, MessageType::kGossipModel,
            MessageType::kGossipDone, MessageType::kTreeModel})
        node.On(type, [&mailbox](Message m) { mailbox.Put(std::move(m)); });
      ASSERT_TRUE(node.Join("inproc://coordinator", milliseconds(5000)).ok());
      std::vector<float>& params = result.models[w];
      std::vector<float> grads(params.size(), 0.0f);
      Mutex mu;
      ExchangeEnv env;
      env.options = &o;
      env.index = w;
      env.model = {params.data(), grads.data(),
                   static_cast<int64_t>(params.size()), nullptr};
      env.rpc = &node.rpc();
      env.member = &node.member();
      env.mailbox = &mailbox;
      env.schedule.lr = 0.0;
      env.metrics = &result.metrics[w];
      env.params_mu = &mu;
      env.broadcast_initial = false;
      auto exchange = MakeExchange(env);
      ASSERT_TRUE(exchange.ok()) << exchange.status().ToString();
      ASSERT_TRUE((*exchange)->Start().ok());
      for (int64_t it = 0; it < steps; ++it) {
        ASSERT_TRUE((*exchange)->BeforeStep(it).ok());
        if (step_ms > 0) std::this_thread::sleep_for(milliseconds(step_ms));
        Status st = (*exchange)->AfterStep(it);
        ASSERT_TRUE(st.ok()) << st.ToString();
      }
      ASSERT_TRUE((*exchange)->Finish(steps).ok());
      result.weights[w] = result.metrics[w].gossip_weight;
      ASSERT_TRUE(node.member().ReportDone().ok());
      node.Leave();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(coordinator.WaitForWorkers(milliseconds(5000)).ok());
  coordinator.Stop();
  return result;
}

Models RandomModels(int n, int size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Models m(n, std::vector<float>(size));
  for (auto& x : m)
    for (float& v : x) v = normal(rng);
  return m;
}

double ConsensusDistance(const Models& m) {
  const size_t size = m[0].size();
  std::vector<double> avg(size, 0.0);
  for (const auto& x : m)
    for (size_t i = 0; i < size; ++i) avg[i] += x[i] / m.size();
  double total = 0;
  for (const auto& x : m) {
    double sq = 0;
    for (size_t i = 0; i < size; ++i) sq += (x[i] - avg[i]) * (x[i] - avg[i]);
    total += std::sqrt(sq);
  }
  return total / m.size();
}

TEST(NeighboursTest, RingAndTorus) {
  EXPECT_EQ(Neighbours(Topology::kRing, 0, 5), (std::vector<int>{1, 4}));
  EXPECT_EQ(Neighbours(Topology::kRing, 1, 2), (std::vector<int>{0}));
  EXPECT_TRUE(Neighbours(Topology::kRing, 0, 1).empty());
  // 6 = 2 x 3 grid with wrap-around: node 4 is row 1, column 1.
  EXPECT_EQ(Neighbours(Topology::kTorus, 4, 6), (std::vector<int>{1, 3, 5}));
  // 9 = 3 x 3: four distinct neighbours.
  EXPECT_EQ(Neighbours(Topology::kTorus, 4, 9), (std::vector<int>{1, 3, 5, 7}));
}

// D-PSGD on a ring with lr 0 is x <- W x with W the ring's uniform mixing
// matrix (1/3 on the diagonal and both neighbours): after k steps the
// models are W^k X, and the consensus distance shrinks accordingly.
TEST(NeighbourExchangeTest, RingWithZeroRateAppliesTheMixingMatrix) {
  const int n = 5, size = 64;
  const Models init = RandomModels(n, size, 11);
  constexpr int64_t kSteps = 4;
  PeerResult got = RunPeers(RunMode::kDpsgd, init, kSteps);
  Models want = init;
  for (int64_t k = 0; k < kSteps; ++k) {
    Models next = want;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < size; ++j)
        next[i][j] =
            (want[i][j] + want[(i + 1) % n][j] + want[(i + n - 1) % n][j]) /
            3.0f;
    want = next;
  }
  double max_diff = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < size; ++j)
      max_diff =
          std::max(max_diff, double(std::fabs(want[i][j] - got.models[i][j])));
  EXPECT_LT(max_diff, 1e-5);
  // The rate: each step shrinks the distance by at most the second largest
  // eigenvalue of W, (1 + 2 cos(2 pi / 5)) / 3 = 0.539; and it does shrink.
  const double lambda2 = (1 + 2 * std::cos(2 * M_PI / n)) / 3;
  const double before = ConsensusDistance(init);
  const double after = ConsensusDistance(got.models);
  EXPECT_LT(after, before * std::pow(lambda2, kSteps) * 1.5);
  EXPECT_LT(after, before * 0.2);
}

TEST(NeighbourExchangeTest, FourNodeRingContractsByExactlyOneThird) {
  // n = 4: every non-consensus eigenvalue of W has modulus 1/3, so the
  // deviation from the average shrinks by exactly 3x per step.
  const Models init = RandomModels(4, 32, 5);
  PeerResult got = RunPeers(RunMode::kDpsgd, init, 1);
  double dev0 = 0, dev1 = 0;
  for (int j = 0; j < 32; ++j) {
    double mean = 0;
    for (int i = 0; i < 4; ++i) mean += init[i][j] / 4;
    for (int i = 0; i < 4; ++i) {
      dev0 += (init[i][j] - mean) * (init[i][j] - mean);
      dev1 += (got.models[i][j] - mean) * (got.models[i][j] - mean);
    }
  }
  EXPECT_NEAR(std::sqrt(dev1 / dev0), 1.0 / 3.0, 1e-4);
}

// GoSGD with lr 0: the weights keep summing to 1, the weighted average of
// the models is conserved, and the models reach consensus.
TEST(GossipExchangeTest, ConservesWeightAndReachesConsensus) {
  const int n = 4, size = 16;
  const Models init = RandomModels(n, size, 3);
  PeerResult got = RunPeers(RunMode::kGossip, init, 150, Topology::kRing, 1.0,
                            /*step_ms=*/1);
  double total = 0;
  for (float a : got.weights) total += a;
  EXPECT_NEAR(total, 1.0, 1e-5);
  for (int j = 0; j < size; ++j) {
    double before = 0, after = 0;
    for (int i = 0; i < n; ++i) {
      before += init[i][j] / n;
      after += got.weights[i] * got.models[i][j];
    }
    EXPECT_NEAR(after, before, 1e-4) << j;
  }
  EXPECT_LT(ConsensusDistance(got.models), 1e-3 * ConsensusDistance(init));
  int64_t pushes = 0;
  for (const auto& m : got.metrics) pushes += m.exchanges;
  EXPECT_EQ(pushes, n * 150);  // p = 1: every step pushes
}

TEST(GossipExchangeTest, NoPushesNoMixing) {
  // Control: with p = 0 nothing moves.
  const Models init = RandomModels(3, 8, 9);
  PeerResult got = RunPeers(RunMode::kGossip, init, 20, Topology::kRing, 0.0);
  EXPECT_EQ(got.models, init);
}

TEST(TreeTest, ParentsAndChildren) {
  EXPECT_EQ(TreeParent(0, 2), -1);
  EXPECT_EQ(TreeParent(4, 2), 1);
  EXPECT_EQ(TreeChildren(1, 2, 5), (std::vector<int>{3, 4}));
  EXPECT_EQ(TreeChildren(1, 2, 4), (std::vector<int>{3}));
  EXPECT_EQ(TreeChildren(0, 3, 7), (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(TreeChildren(3, 2, 7).empty());
}

// TreeEASGD with lr 0, sending only upwards: the leaves never receive and
// keep their models exactly; the root is pulled towards its children.
TEST(TreeExchangeTest, UpwardOnlyMovesOnlyTheParents) {
  const Models init = RandomModels(3, 16, 21);
  PeerResult got = RunPeers(RunMode::kTreeEasgd, init, 30, Topology::kRing, 1.0,
                            /*step_ms=*/1, /*tau_up=*/1,
                            /*tau_down=*/1000000);
  EXPECT_EQ(got.models[1], init[1]);
  EXPECT_EQ(got.models[2], init[2]);
  EXPECT_NE(got.models[0], init[0]);
  // Every received model was applied as w += alpha (x - w), which keeps
  // the root inside the box the three models span.
  for (int j = 0; j < 16; ++j) {
    const float lo = std::min({init[0][j], init[1][j], init[2][j]});
    const float hi = std::max({init[0][j], init[1][j], init[2][j]});
    EXPECT_GE(got.models[0][j], lo - 1e-5f);
    EXPECT_LE(got.models[0][j], hi + 1e-5f);
  }
}

TEST(TreeExchangeTest, BothWaysReachConsensus) {
  const Models init = RandomModels(7, 16, 13);
  PeerResult got = RunPeers(RunMode::kTreeEasgd, init, 200, Topology::kRing,
                            1.0, /*step_ms=*/1, /*tau_up=*/1, /*tau_down=*/1);
  EXPECT_LT(ConsensusDistance(got.models), 1e-2 * ConsensusDistance(init));
}

}  // namespace
}  // namespace strata
