// NewBoundTransport(): the scheme of the address picks the backend, and what
// does not fit a backend (an unknown scheme, CURVE without ZeroMQ, a peer of
// another backend) is refused, saying which address.
#include "transport/factory.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "transport/inproc/transport.h"
#include "transport/ucx/transport.h"
#include "transport/zmq/curve_keys.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kWait{5000};

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A cluster key pair, or nullopt when libzmq has no CURVE.
std::optional<CurveKeys> ClusterKeys() {
  if (!CheckCurveSupport().ok()) return std::nullopt;
  Result<CurveKeyPair> pair = GenerateCurveKeyPair();
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  if (!pair.ok()) return std::nullopt;
  return CurveKeys::ForCluster(*pair);
}

// The transport kinds (cluster.transport's values) the factory is run over.
class FactoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "ucx" && !HaveUcx()) {
      GTEST_SKIP() << "this build has no UCX";
    }
    if (GetParam() == "tcp") {
      Result<std::shared_ptr<ZmqContext>> context = ZmqContext::Create(1);
      ASSERT_TRUE(context.ok()) << context.status().ToString();
      options_.zmq_context = *context;
    }
    options_.fabric = &fabric_;
  }

  std::string Local() {
    Result<std::string> endpoint = LocalEndpoint(GetParam());
    EXPECT_TRUE(endpoint.ok()) << endpoint.status().ToString();
    return endpoint.ok() ? *endpoint : std::string();
  }

  InProcFabric fabric_;
  TransportOptions options_;
};

TEST_P(FactoryTest, SchemePicksTheBackend) {
  auto a = NewBoundTransport(0, Local(), options_);
  auto b = NewBoundTransport(1, Local(), options_);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Transport& from = **a;
  Transport& to = **b;
  EXPECT_EQ(from.node_id(), 0);
  EXPECT_EQ(to.node_id(), 1);
  // Bound, at an address of the scheme asked for.
  EXPECT_TRUE(StartsWith(to.endpoint(), GetParam() + "://")) << to.endpoint();
  EXPECT_EQ(to.endpoint().find('*'), std::string::npos) << to.endpoint();
  // Only the in-process backend delivers on the senders' threads.
  EXPECT_EQ(to.DeliversOnSendersThreads(), GetParam() == "inproc");

  ASSERT_TRUE(from.Connect(1, to.endpoint()).ok());
  Message msg;
  msg.header.type = MessageType::kHeartbeat;
  msg.header.request_id = 42;
  ASSERT_TRUE(from.Send(1, std::move(msg)).ok());
  Result<Message> got = to.Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.sender, 0);
  EXPECT_EQ(got->header.request_id, 42u);

  // Only a UCX transport describes its UCX route (the others say they are
  // not UCX).
  Result<std::string> route = UcxRouteInfoForTesting(from, 1);
  if (GetParam() == "ucx") {
    EXPECT_TRUE(route.ok()) << route.status().ToString();
  } else {
    EXPECT_FALSE(route.ok());
  }
}

TEST_P(FactoryTest, CurveOnlyOverZeroMq) {
  std::optional<CurveKeys> keys = ClusterKeys();
  if (!keys) GTEST_SKIP() << "libzmq without CURVE";
  options_.curve = keys;
  const std::string endpoint = Local();
  auto t = NewBoundTransport(3, endpoint, options_);
  if (GetParam() == "tcp" || GetParam() == "ipc") {
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return;
  }
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  const std::string& why = t.status().message();
  EXPECT_TRUE(Contains(why, "CURVE")) << why;
  EXPECT_TRUE(Contains(why, "node 3")) << why;
  EXPECT_TRUE(Contains(why, endpoint)) << why;
  EXPECT_TRUE(Contains(why, "no authentication") ||
              Contains(why, "no peer outside this process"))
      << why;
}

TEST_P(FactoryTest, PeerOfAnotherBackendIsRefused) {
  options_.known_peer =
      GetParam() == "ucx" ? "tcp://127.0.0.1:5555" : "ucx://127.0.0.1:5555";
  auto t = NewBoundTransport(2, Local(), options_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), options_.known_peer))
      << t.status().message();
  EXPECT_TRUE(Contains(t.status().message(), "same transport"))
      << t.status().message();
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

INSTANTIATE_TEST_SUITE_P(Kinds, FactoryTest,
                         ::testing::Values("inproc", "tcp", "ipc", "ucx"),
                         ParamName);

// The refusals that need no backend at all: they come before any is made.
TEST(FactoryRefusals, CurveOverUcxEvenWithoutUcx) {
  std::optional<CurveKeys> keys = ClusterKeys();
  if (!keys) GTEST_SKIP() << "libzmq without CURVE";
  TransportOptions options;
  options.curve = keys;
  auto t = NewBoundTransport(5, "ucx://127.0.0.1:*", options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), "ucx://127.0.0.1:*"))
      << t.status().message();
}

TEST(FactoryRefusals, UnknownSchemeNamesTheAddress) {
  InProcFabric fabric;
  TransportOptions options;
  options.fabric = &fabric;
  for (const std::string endpoint :
       {"foo://bar", "tcp:/127.0.0.1:5", "127.0.0.1:5555", "", "tcp://",
        "inproc://", "UCX://127.0.0.1:1"}) {
    auto t = NewBoundTransport(4, endpoint, options);
    ASSERT_FALSE(t.ok()) << endpoint;
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument) << endpoint;
    EXPECT_TRUE(Contains(t.status().message(), "'" + endpoint + "'"))
        << t.status().message();
  }
}

TEST(FactoryRefusals, InProcNeedsAFabric) {
  auto t = NewBoundTransport(1, "inproc://*", TransportOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), "fabric")) << t.status().message();
}

TEST(FactoryRefusals, BindErrorsNameNodeAndAddress) {
  InProcFabric fabric;
  TransportOptions options;
  options.fabric = &fabric;
  auto first = NewBoundTransport(1, "inproc://taken", options);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = NewBoundTransport(2, "inproc://taken", options);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(Contains(second.status().message(),
                       "node 2 binding "
                       "inproc://taken"))
      << second.status().message();
}

// A wildcard bind advertises the address that routes toward the peer it
// was given (loopback here), or the host it was told.
TEST(FactoryAdvertising, WildcardTcpBindAdvertisesRouteToPeer) {
  TransportOptions options;
  options.known_peer = "tcp://127.0.0.1:5555";
  auto t = NewBoundTransport(1, "tcp://0.0.0.0:*", options);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string host, port;
  ASSERT_TRUE(SplitTcpEndpoint((*t)->endpoint(), &host, &port))
      << (*t)->endpoint();
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_NE(port, "*");

  options.advertise_host = "node7.example";
  auto named = NewBoundTransport(2, "tcp://*:*", options);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_TRUE(SplitTcpEndpoint((*named)->endpoint(), &host, &port));
  EXPECT_EQ(host, "node7.example");
}

TEST(FactoryAdvertising, WildcardWithoutPeerReportsAsBound) {
  auto t = NewBoundTransport(1, "tcp://0.0.0.0:*", TransportOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(StartsWith((*t)->endpoint(), "tcp://0.0.0.0:"))
      << (*t)->endpoint();
}

TEST(LocalEndpointTest, OnePerKind) {
  EXPECT_EQ(*LocalEndpoint("inproc"), "inproc://*");
  EXPECT_EQ(*LocalEndpoint("tcp"), "tcp://127.0.0.1:*");
  EXPECT_EQ(*LocalEndpoint("ipc"), "ipc://*");
  EXPECT_EQ(*LocalEndpoint("ucx"), "ucx://127.0.0.1:*");
  Result<std::string> bad = LocalEndpoint("rdma");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "rdma"));
}

TEST(ResolveBindHostTest, ResolvesNamesOnly) {
  EXPECT_EQ(*ResolveBindHost("tcp://localhost:5555"), "tcp://127.0.0.1:5555");
  for (const std::string same :
       {"tcp://10.1.2.3:7", "tcp://*:5", "tcp://0.0.0.0:5", "ipc:///tmp/x",
        "ucx://localhost:1", "inproc://a"}) {
    Result<std::string> r = ResolveBindHost(same);
    ASSERT_TRUE(r.ok()) << same << ": " << r.status().ToString();
    EXPECT_EQ(*r, same);
  }
  Result<std::string> missing = ResolveBindHost("tcp://no-such-host.invalid:1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "no-such-host.invalid"));
}

}  // namespace
}  // namespace strata
