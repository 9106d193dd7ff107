// The control channel (transport/zmq/request_reply.h) over loopback TCP:
// plain, and under CURVE, where only the cluster key pair is answered.
#include "transport/zmq/request_reply.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace strata {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<ReplyServer> Upper(const std::optional<CurveKeys>& curve) {
  auto s =
      ReplyServer::Start("tcp://127.0.0.1:*", curve, [](const std::string& in) {
        std::string out = in;
        for (char& c : out) c = static_cast<char>(std::toupper(c));
        return out;
      });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(RequestReplyTest, ARequestGetsItsReply) {
  auto server = Upper(std::nullopt);
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  for (const char* text : {"scale", "again"}) {
    auto reply = RequestReply(server->endpoint(), std::nullopt, text,
                              milliseconds(5000));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    std::string want = text;
    for (char& c : want) c = static_cast<char>(std::toupper(c));
    EXPECT_EQ(*reply, want);
  }
}

TEST(RequestReplyTest, UnderCurveOnlyTheClusterKeyIsAnswered) {
  if (!CheckCurveSupport().ok()) GTEST_SKIP() << "libzmq has no CURVE";
  auto cluster = GenerateCurveKeyPair();
  auto other = GenerateCurveKeyPair();
  ASSERT_TRUE(cluster.ok() && other.ok());
  const CurveKeys keys = CurveKeys::ForCluster(*cluster);
  auto server = Upper(keys);
  ASSERT_NE(server, nullptr);
  auto reply = RequestReply(server->endpoint(), keys, "ok", milliseconds(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(*reply, "OK");
  // Another key pair that knows the server's public key, and a client
  // without CURVE: neither gets an answer.
  CurveKeys stranger = keys;
  stranger.own = *other;
  // A client of another cluster: its own pair, and its own idea of the
  // server's key.
  const CurveKeys elsewhere = CurveKeys::ForCluster(*other);
  for (const std::optional<CurveKeys>& client :
       {std::optional<CurveKeys>(stranger), std::optional<CurveKeys>(elsewhere),
        std::optional<CurveKeys>()}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto refused =
        RequestReply(server->endpoint(), client, "no", milliseconds(1000));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), Status::Code::kDeadlineExceeded);
    EXPECT_NE(refused.status().message().find(server->endpoint()),
              std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
  // The refused clients left nothing behind: the cluster key is answered.
  auto again =
      RequestReply(server->endpoint(), keys, "still", milliseconds(5000));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, "STILL");
}

TEST(RequestReplyTest, BadEndpointsAreRefusedNamingThem) {
  auto bad = ReplyServer::Start("udp://1.2.3.4:5", std::nullopt,
                                [](const std::string& s) { return s; });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("udp://1.2.3.4:5"), std::string::npos);
  auto server = Upper(std::nullopt);
  ASSERT_NE(server, nullptr);
  auto taken = ReplyServer::Start(server->endpoint(), std::nullopt,
                                  [](const std::string& s) { return s; });
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), Status::Code::kUnavailable);
  auto client = RequestReply("nonsense", std::nullopt, "x", milliseconds(100));
  EXPECT_EQ(client.status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace strata
