// The coordinator passes the run facts (parameter count, iteration budget)
// the workers announce to every node, and refuses a node that disagrees.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "cluster/node.h"
#include "coordinator/coordinator.h"
#include "coordinator/inproc_coordinator.h"
#include "transport/inproc/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

struct JoinResult {
  Status status;
  std::string facts;  // what on_run_facts received (servers)
};

// One server and two workers; worker w announces `facts[w]`.
std::vector<JoinResult> JoinAll(const std::vector<std::string>& facts) {
  const RoleTable roles = RoleTable::Standard(/*servers=*/1, 2, false);
  InProcFabric fabric;
  CoordinatorOptions co;
  co.roles = roles;
  co.join_timeout = milliseconds(3000);
  auto coordinator_ptr = StartInProcCoordinator(fabric, co);
  Coordinator& coordinator = *coordinator_ptr;
  std::vector<JoinResult> results(3);
  std::vector<std::thread> threads;
  for (NodeId id = 1; id <= 3; ++id) {
    threads.emplace_back([&, id] {
      auto t = fabric.NewTransport(id);
      ASSERT_TRUE(t.ok());
      ASSERT_TRUE((*t)->Bind("inproc://*").ok());
      RpcEndpoint rpc(std::move(*t), [](Message) {});
      ClusterMember member(rpc, roles, milliseconds(100));
      rpc.Start();
      JoinResult& r = results[id - 1];
      if (id == roles.ServerId(0)) {
        r.status = member.Join("inproc://coordinator", milliseconds(3000), "",
                               [&r](const std::string& f) {
                                 r.facts = f;
                                 return Status::Ok();
                               });
      } else {
        r.status = member.Join("inproc://coordinator", milliseconds(3000),
                               facts[id - roles.WorkerId(0)]);
      }
      rpc.Stop();
    });
  }
  for (auto& t : threads) t.join();
  coordinator.Stop();
  return results;
}

TEST(RunFactsTest, ServersLearnWhatTheWorkersAnnounce) {
  const std::string facts = R"({"iterations":20,"num_params":1234})";
  auto r = JoinAll({facts, facts});
  for (const auto& j : r) EXPECT_TRUE(j.status.ok()) << j.status.ToString();
  EXPECT_EQ(r[0].facts, facts);
}

TEST(RunFactsTest, ADisagreeingWorkerIsRefusedNamingBoth) {
  auto r = JoinAll({R"({"iterations":20,"num_params":1234})",
                    R"({"iterations":20,"num_params":999})"});
  // The worker that registered second is refused with both values; the
  // cluster then cannot assemble, and the others' joins time out.
  int disagreeing = 0;
  for (int w = 1; w <= 2; ++w) {
    EXPECT_FALSE(r[w].status.ok());
    const std::string& m = r[w].status.message();
    if (m.find("disagrees") == std::string::npos) continue;
    ++disagreeing;
    EXPECT_NE(m.find("1234"), std::string::npos) << m;
    EXPECT_NE(m.find("999"), std::string::npos) << m;
  }
  EXPECT_EQ(disagreeing, 1);
}

}  // namespace
}  // namespace strata
