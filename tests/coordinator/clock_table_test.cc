#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "cluster/member.h"
#include "coordinator/coordinator.h"
#include "coordinator/inproc_coordinator.h"
#include "transport/inproc/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// Bounded staleness as a property: n workers with random per-iteration
// delays go through the coordinator's clock table; whenever a worker starts
// iteration c, every live worker has completed at least c - s iterations.
// Coordinator and workers run as threads over the in-process transport.
// Returns the largest lead observed. `enforce` false runs the coordinator
// without a bound (as async does) to show the check can fail.
int64_t CheckBound(int n, int64_t s, uint64_t seed, bool enforce = true) {
  const RoleTable roles = RoleTable::Standard(/*servers=*/0, n, false);
  InProcFabric fabric;
  CoordinatorOptions co;
  co.roles = roles;
  co.staleness = enforce ? s : -1;
  co.heartbeat_timeout = milliseconds(10000);
  auto coordinator_ptr = StartInProcCoordinator(fabric, co);
  Coordinator& coordinator = *coordinator_ptr;

  constexpr int64_t kIters = 25;
  std::vector<std::atomic<int64_t>> completed(n);
  for (auto& c : completed) c = 0;
  std::atomic<int64_t> violations{0}, max_lead{0}, starts{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      auto t = fabric.NewTransport(roles.WorkerId(w));
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE((*t)->Bind("inproc://*").ok());
      ClusterMember* member_ptr = nullptr;
      RpcEndpoint rpc(std::move(*t), [&](Message m) {
        if (member_ptr) member_ptr->OnMessage(m);
      });
      ClusterMember member(rpc, roles, milliseconds(100));
      member_ptr = &member;
      rpc.Start();
      ASSERT_TRUE(member.Join("inproc://coordinator", milliseconds(5000)).ok());
      std::mt19937_64 rng(seed * 31 + w);
      for (int64_t c = 0; c < kIters; ++c) {
        ASSERT_TRUE(member.ClockWait(c, milliseconds(10000)).ok());
        int64_t min_done = kIters;
        for (int v = 0; v < n; ++v)
          min_done = std::min(min_done, completed[v].load());
        int64_t lead = c - min_done;
        if (lead > s) ++violations;
        int64_t prev = max_lead.load();
        while (lead > prev && !max_lead.compare_exchange_weak(prev, lead)) {
        }
        ++starts;
        // Heterogeneous workers: worker w is slower on average.
        std::this_thread::sleep_for(
            std::chrono::microseconds(rng() % (400 * (w + 1))));
        completed[w] = c + 1;
      }
      ASSERT_TRUE(member.ReportDone().ok());
      rpc.Stop();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(coordinator.WaitForWorkers(milliseconds(5000)).ok());
  coordinator.Stop();
  EXPECT_EQ(starts.load(), n * kIters);
  if (enforce) {
    EXPECT_EQ(violations.load(), 0) << "n=" << n << " s=" << s;
    EXPECT_LE(max_lead.load(), s);
  }
  return max_lead.load();
}

TEST(ClockTableTest, NoWorkerRunsMoreThanSClocksAhead) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    CheckBound(4, 2, seed);
    CheckBound(3, 1, seed);
  }
}

TEST(ClockTableTest, ZeroStalenessIsLockstepLikeSync) {
  for (uint64_t seed = 1; seed <= 3; ++seed) CheckBound(4, 0, seed);
}

TEST(ClockTableTest, WithoutTheBoundFastWorkersRunAhead) {
  // The control: the same workers with no clock gating drift apart, so the
  // property above is not vacuous.
  EXPECT_GT(CheckBound(4, 1, 7, /*enforce=*/false), 1);
}

TEST(ClockTableTest, ShapeMapsIdsToRoles) {
  const RoleTable roles = RoleTable::Standard(/*servers=*/2, 3, true);
  Role role;
  int index;
  ASSERT_TRUE(roles.RoleOf(4, &role, &index).ok());
  EXPECT_EQ(role, Role::kWorker);
  EXPECT_EQ(index, 1);
  ASSERT_TRUE(roles.RoleOf(6, &role, &index).ok());
  EXPECT_EQ(role, Role::kEvaluator);
  EXPECT_FALSE(roles.RoleOf(7, &role, &index).ok());
  EXPECT_EQ(roles.Describe(2), "server 1 (node 2)");
}

}  // namespace
}  // namespace strata
