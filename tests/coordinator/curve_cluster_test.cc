// With cluster.security = "curve" (ZmqOptions::curve), end to end over
// loopback TCP: a ZeroMQ peer without keys that sends a well-formed push to
// a parameter server changes no parameter (the control: the same push to a
// server without CURVE does change them), and a node with a wrong key, or
// with none, cannot register with the coordinator (the control: a node with
// the cluster's key then registers with the same coordinator).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "cluster/member.h"
#include "coordinator/coordinator.h"
#include "ps/client.h"
#include "ps/server.h"
#include "transport/curve_test_util.h"
#include "transport/wire.h"
#include "transport/zmq/curve_keys.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kWait{10000};
constexpr int64_t kKeys = 64;
constexpr NodeId kServer = 1;
constexpr NodeId kWorker = 100;

CurveKeyPair NewPair() {
  auto pair = GenerateCurveKeyPair();
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return *pair;
}

// A raw ZeroMQ DEALER without keys sends a well-formed kPush, as a worker's
// transport would (it even claims to be the worker).
void PushFromARawSocket(const std::string& endpoint,
                        const std::vector<float>& grad) {
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 500);
  raw.connect(endpoint);
  Message push;
  push.header.type = MessageType::kPush;
  push.header.sender = kWorker;
  push.header.receiver = kServer;
  push.header.request_id = 999;
  push.header.key_begin = 0;
  push.header.key_end = kKeys;
  push.header.clock = 0;
  push.payloads.push_back(Buffer::CopyOf(grad));
  for (wire::Segment& segment :
       wire::EncodeSegments(std::move(push), 1, 1 << 20)) {
    for (size_t i = 0; i < segment.size(); ++i) {
      auto sent = raw.send(zmq::buffer(segment[i].data(), segment[i].size()),
                           i + 1 < segment.size() ? zmq::send_flags::sndmore
                                                  : zmq::send_flags::none);
      ASSERT_TRUE(sent.has_value());
    }
  }
  // Give the socket time to try before it closes (linger bounds the close).
  std::this_thread::sleep_for(milliseconds(300));
}

struct AfterAttack {
  std::vector<float> params;
  int64_t updates = -1;
  uint64_t refused = 0;
};

// One server (async SGD, rate 1) and one worker with `curve` (or neither);
// the worker pushes the initial parameters (5.0), then a key-less raw
// socket pushes a gradient of ones. Returns what a pull then sees.
AfterAttack PushWithoutKeys(const std::optional<CurveKeys>& curve) {
  AfterAttack out;
  auto layout = KeyLayout::Balanced(kKeys, 1);
  EXPECT_TRUE(layout.ok());
  auto st = curve_test::TcpNode(kServer, curve);
  auto wt = curve_test::TcpNode(kWorker, curve);
  if (!st || !wt || !layout.ok()) return out;
  EXPECT_TRUE(wt->Connect(kServer, st->endpoint()).ok());
  EXPECT_TRUE(st->Connect(kWorker, wt->endpoint()).ok());
  const std::string server_endpoint = st->endpoint();

  ServerOptions so;
  so.range = layout->range(0);
  so.schedule.lr = 1.0;
  so.policy.mode = UpdatePolicy::Mode::kAsync;
  so.policy.num_workers = 1;
  ParameterServer server(so, std::move(st));
  server.Start();
  RpcEndpoint rpc(std::move(wt), [](Message) {});
  rpc.Start();
  PsClient client(rpc, *layout, {kServer});
  const std::vector<float> init(kKeys, 5.0f);
  auto pushed = client.PushInitial(init.data())->Wait(kWait);
  EXPECT_TRUE(pushed.ok()) << pushed.status().ToString();

  PushFromARawSocket(server_endpoint, std::vector<float>(kKeys, 1.0f));
  // Wait (bounded) until the server either applied it or refused the peer.
  const auto deadline = Clock::now() + kWait;
  while (Clock::now() < deadline && server.stats().updates == 0 &&
         server.transport().stats().connections_refused == 0) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  // A push that got through would be applied within this grace period.
  std::this_thread::sleep_for(milliseconds(300));
  out.params.assign(kKeys, -1.0f);
  auto pulled = client.Pull(out.params.data(), {})->Wait(kWait);
  EXPECT_TRUE(pulled.ok()) << pulled.status().ToString();
  out.updates = server.stats().updates;
  out.refused = server.transport().stats().connections_refused;
  rpc.Stop();
  server.Stop();
  return out;
}

TEST(CurveClusterTest, AKeylessPeerPushingAGradientChangesNoParameter) {
  // Control: without CURVE the raw push is applied (5 - 1 * 1 = 4).
  const AfterAttack plain = PushWithoutKeys(std::nullopt);
  EXPECT_EQ(plain.params, std::vector<float>(kKeys, 4.0f));
  EXPECT_EQ(plain.updates, 1);

  const AfterAttack curve = PushWithoutKeys(CurveKeys::ForCluster(NewPair()));
  EXPECT_EQ(curve.params, std::vector<float>(kKeys, 5.0f));
  EXPECT_EQ(curve.updates, 0);
  EXPECT_GE(curve.refused, 1u);
}

// Tries to register node 1 (the one worker) with `curve`; the join gives up
// after `timeout`.
Status Register(const std::string& coordinator, const RoleTable& roles,
                const std::optional<CurveKeys>& curve, milliseconds timeout) {
  auto t = curve_test::TcpNode(roles.WorkerId(0), curve);
  if (!t) return Status::Internal("no transport");
  RpcEndpoint rpc(std::move(t), [](Message) {});
  ClusterMember member(rpc, roles, milliseconds(100));
  rpc.Start();
  Status joined = member.Join(coordinator, timeout);
  member.StopHeartbeats();
  rpc.Stop();
  return joined;
}

TEST(CurveClusterTest, ANodeWithAWrongKeyCannotRegister) {
  const CurveKeyPair cluster = NewPair();
  const RoleTable roles = RoleTable::Make({{Role::kWorker, 1}});
  CoordinatorOptions co;
  co.roles = roles;
  co.join_timeout = milliseconds(60000);
  co.heartbeat_timeout = milliseconds(60000);
  auto ct = curve_test::TcpNode(roles.CoordinatorId(),
                                CurveKeys::ForCluster(cluster));
  ASSERT_TRUE(ct);
  const std::string endpoint = ct->endpoint();
  Coordinator coordinator(co, std::move(ct));
  coordinator.Start();

  testing::internal::CaptureStderr();
  // Knows the cluster's public key, holds a key pair of its own.
  const CurveKeyPair wrong = NewPair();
  Status with_wrong_key = Register(
      endpoint, roles, CurveKeys{wrong, cluster.public_key, {wrong.public_key}},
      milliseconds(1500));
  Status without_keys =
      Register(endpoint, roles, std::nullopt, milliseconds(1500));
  const uint64_t refused = coordinator.transport().stats().connections_refused;
  // Control: the cluster's key registers with the same coordinator.
  Status with_cluster_key = Register(
      endpoint, roles, CurveKeys::ForCluster(cluster), milliseconds(10000));
  const std::string log = testing::internal::GetCapturedStderr();
  coordinator.Stop();

  EXPECT_EQ(with_wrong_key.code(), Status::Code::kDeadlineExceeded)
      << with_wrong_key.ToString();
  EXPECT_EQ(without_keys.code(), Status::Code::kDeadlineExceeded)
      << without_keys.ToString();
  EXPECT_GE(refused, 2u);
  EXPECT_NE(log.find(wrong.public_key), std::string::npos) << log;
  EXPECT_NE(log.find("node 0: refused a connection at " + endpoint),
            std::string::npos)
      << log;
  EXPECT_TRUE(with_cluster_key.ok()) << with_cluster_key.ToString();
}

}  // namespace
}  // namespace strata
