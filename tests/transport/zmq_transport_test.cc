// ZeroMQ-specific behaviour: hostile input, timeouts, options.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "transport/raw_garbage.h"
#include "transport/wire.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Frames = std::vector<std::vector<uint8_t>>;

constexpr milliseconds kWait{5000};

std::unique_ptr<Transport> BoundNode(NodeId id, ZmqOptions options = {}) {
  auto r = NewZmqTransport(id, std::move(options));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::unique_ptr<Transport> t = std::move(r).value();
  Status s = t->Bind("tcp://127.0.0.1:*");
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t;
}

std::vector<uint8_t> Bytes(const Buffer& b) {
  return std::vector<uint8_t>(b.data(), b.data() + b.size());
}

MessageHeader Header(NodeId sender, NodeId receiver) {
  MessageHeader h;
  h.type = MessageType::kPush;
  h.sender = sender;
  h.receiver = receiver;
  return h;
}

void SendRaw(zmq::socket_t& socket, const Frames& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    auto sent = socket.send(zmq::buffer(frames[i].data(), frames[i].size()),
                            i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                  : zmq::send_flags::none);
    ASSERT_TRUE(sent.has_value());
  }
}

// Sends a well-formed message by hand, the way a ZmqTransport would.
void SendValidRaw(zmq::socket_t& socket, Message msg, uint32_t transfer) {
  for (wire::Segment& segment :
       wire::EncodeSegments(std::move(msg), transfer, 1 << 20)) {
    Frames frames;
    for (const Buffer& f : segment) frames.push_back(Bytes(f));
    SendRaw(socket, frames);
  }
}

TEST(ZmqTransportTest, DropsGarbageFromARawSocketAndKeepsDelivering) {
  auto rx = BoundNode(2);
  auto tx = BoundNode(1);
  ASSERT_TRUE(tx->Connect(2, rx->endpoint()).ok());

  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(rx->endpoint());

  std::mt19937 rng(1);
  std::vector<uint8_t> noise(1000);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> good =
      Bytes(wire::EncodeHeader(Header(1, 2), {8}, 1));
  std::vector<uint8_t> bad_magic = good;
  bad_magic[1] ^= 0xFF;
  std::vector<uint8_t> bad_version = good;
  bad_version[4] = 9;
  const std::vector<uint8_t> truncated(good.begin(), good.begin() + 20);
  const std::vector<uint8_t> two_frames =
      Bytes(wire::EncodeHeader(Header(1, 2), {2 << 20}, 5));
  const std::vector<uint8_t> misrouted =
      Bytes(wire::EncodeHeader(Header(1, 3), {}, 6));
  const std::vector<uint8_t> orphan = Bytes(wire::EncodeContinuation({77, 1}));
  const std::vector<uint8_t> wrong_transfer =
      Bytes(wire::EncodeContinuation({99, 1}));
  Frames too_many(3000, std::vector<uint8_t>(1, 0));
  too_many[0] = good;

  testing::internal::CaptureStderr();
  const std::vector<Frames> garbage = {
      {{'h', 'e', 'l', 'l', 'o'}},
      {{}},
      {noise},
      {bad_magic, std::vector<uint8_t>(8)},
      {truncated},
      {bad_version, std::vector<uint8_t>(8)},
      {good, std::vector<uint8_t>(9)},  // 9 bytes where 8 were declared
      {misrouted},
      {orphan, std::vector<uint8_t>(4)},
      {two_frames, std::vector<uint8_t>(1 << 20)},      // first half only...
      {wrong_transfer, std::vector<uint8_t>(1 << 20)},  // ...then a stranger
      too_many,
      {two_frames, std::vector<uint8_t>(1 << 20)},  // left unfinished
  };
  for (const Frames& f : garbage) SendRaw(raw, f);
  // The raw connection itself recovers: a well-formed message after the
  // garbage is delivered (and abandons the unfinished one above).
  Message from_raw;
  from_raw.header = Header(1, 2);
  from_raw.header.request_id = 111;
  from_raw.payloads.push_back(Buffer::CopyOf("abc", 3));
  SendValidRaw(raw, std::move(from_raw), 12);

  Message real;
  real.header.type = MessageType::kPush;
  real.header.request_id = 222;
  real.payloads.push_back(Buffer::Allocate(3 << 20));
  ASSERT_TRUE(tx->Send(2, std::move(real)).ok());

  std::vector<uint64_t> ids;
  for (int i = 0; i < 2; ++i) {
    Result<Message> got = rx->Recv(kWait);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ids.push_back(got->header.request_id);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{111, 222}));
  // One drop per garbage item except the first half of the unfinished
  // message (dropped later, as the "stranger" arrives), plus the abandoned
  // one at the end.
  EXPECT_EQ(rx->stats().messages_dropped, garbage.size() - 2 + 1);
  EXPECT_NE(log.find("dropped input"), std::string::npos);
  EXPECT_NE(log.find("magic"), std::string::npos);
  EXPECT_NE(log.find("addressed to node 3"), std::string::npos);
  EXPECT_NE(log.find("wire version 9"), std::string::npos);
}

TEST(ZmqTransportTest, SurvivesRawTcpGarbage) {
  auto rx = BoundNode(2);
  auto tx = BoundNode(1);
  ASSERT_TRUE(tx->Connect(2, rx->endpoint()).ok());
  ASSERT_TRUE(test_garbage::SendRawTcpGarbage(rx->endpoint(), 2, 3,
                                              /*zmtp_start=*/true));
  Message m;
  m.header.type = MessageType::kHeartbeat;
  ASSERT_TRUE(tx->Send(2, std::move(m)).ok());
  Result<Message> got = rx->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.type, MessageType::kHeartbeat);
}

TEST(ZmqTransportTest, OversizedMessageIsDroppedNotFatal) {
  ZmqOptions small;
  small.limits.max_message_bytes = 1 << 20;
  auto rx = BoundNode(2, small);
  auto tx = BoundNode(1);
  ASSERT_TRUE(tx->Connect(2, rx->endpoint()).ok());
  Message big;
  big.header.type = MessageType::kPush;
  big.payloads.push_back(Buffer::Allocate(3 << 20));
  ASSERT_TRUE(tx->Send(2, std::move(big)).ok());
  Message ok;
  ok.header.type = MessageType::kAck;
  ASSERT_TRUE(tx->Send(2, std::move(ok)).ok());
  Result<Message> got = rx->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.type, MessageType::kAck);
  EXPECT_GE(rx->stats().messages_dropped, 1u);
}

TEST(ZmqTransportTest, StaleFragmentIsDroppedAfterTimeout) {
  ZmqOptions options;
  options.stale_message_timeout = milliseconds(100);
  auto rx = BoundNode(2, options);
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(rx->endpoint());
  SendRaw(raw, {Bytes(wire::EncodeHeader(Header(1, 2), {2 << 20}, 1)),
                std::vector<uint8_t>(1 << 20)});
  testing::internal::CaptureStderr();
  Result<Message> got = rx->Recv(milliseconds(1300));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_EQ(rx->stats().messages_dropped, 1u);
  EXPECT_NE(log.find("abandoned after 1048576 of 2097152 bytes"),
            std::string::npos)
      << log;
}

TEST(ZmqTransportTest, SendTimesOutWhenPeerIsAbsent) {
  ZmqOptions options;
  options.send_hwm = 1;
  options.send_timeout = milliseconds(200);
  options.linger = milliseconds(0);
  auto tx = BoundNode(1, options);
  // Nothing listens on port 1 of loopback; ZeroMQ queues and retries.
  ASSERT_TRUE(tx->Connect(2, "tcp://127.0.0.1:1").ok());
  const auto start = Clock::now();
  Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) {
    Message m;
    m.header.type = MessageType::kHeartbeat;
    s = tx->Send(2, std::move(m));
  }
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("tcp://127.0.0.1:1"), std::string::npos);
  EXPECT_NE(s.message().find("node 2"), std::string::npos);
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

TEST(ZmqTransportTest, SharedContextAndSmallFrames) {
  auto ctx = ZmqContext::Create(1);
  ASSERT_TRUE(ctx.ok());
  ZmqOptions options;
  options.context = *ctx;
  options.frame_bytes = 4096;  // the receiver accepts any split
  auto rx = BoundNode(2, options);
  auto tx = BoundNode(1, options);
  ASSERT_TRUE(tx->Connect(2, rx->endpoint()).ok());
  Message m;
  m.header.type = MessageType::kPush;
  std::vector<float> values(300000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i;
  m.payloads.push_back(Buffer::CopyOf(values));
  ASSERT_TRUE(tx->Send(2, std::move(m)).ok());
  Result<Message> got = rx->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->payloads.at(0).num_floats(), values.size());
  EXPECT_EQ(std::memcmp(got->payloads[0].floats(), values.data(),
                        values.size() * sizeof(float)),
            0);
}

// Interrupt() (used by RpcEndpoint to hand the receiving side to a waiting
// caller): a waiting Recv() returns at once, saying so, and nothing queued
// is lost; a stale interrupt costs at most one early return.
TEST(ZmqTransportTest, InterruptEndsAWaitingRecvAndLosesNothing) {
  auto rx = BoundNode(2);
  auto tx = BoundNode(1);
  ASSERT_TRUE(tx->Connect(2, rx->endpoint()).ok());
  Result<Message> got = Status::Internal("not run");
  const auto start = Clock::now();
  std::thread receiver([&] { got = rx->Recv(milliseconds(20000)); });
  std::this_thread::sleep_for(milliseconds(100));
  rx->Interrupt();
  receiver.join();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("interrupted"), std::string::npos)
      << got.status().ToString();

  // Interrupted with a message already waiting: the message comes first.
  Message m;
  m.header.type = MessageType::kPush;
  m.header.clock = 11;
  ASSERT_TRUE(tx->Send(2, std::move(m)).ok());
  std::this_thread::sleep_for(milliseconds(100));
  rx->Interrupt();
  got = rx->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.clock, 11);
  // The interrupt left over ends at most the next wait early.
  got = rx->Recv(kWait);
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  Message m2;
  m2.header.type = MessageType::kPush;
  m2.header.clock = 12;
  ASSERT_TRUE(tx->Send(2, std::move(m2)).ok());
  got = rx->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.clock, 12);
}

TEST(ZmqTransportTest, EndpointsAndBindErrors) {
  auto a = NewZmqTransport(1).value();
  ASSERT_TRUE(a->Bind("tcp://127.0.0.1:0").ok());
  const std::string ep = a->endpoint();
  EXPECT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
  EXPECT_NE(ep.substr(ep.rfind(':') + 1), "0");
  EXPECT_NE(ep.substr(ep.rfind(':') + 1), "*");

  auto b = NewZmqTransport(2).value();
  Status s = b->Bind(ep);  // taken
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(ep), std::string::npos);
  EXPECT_EQ(b->Bind("inproc://x").code(), Status::Code::kInvalidArgument);

  ZmqOptions bad;
  bad.frame_bytes = 0;
  EXPECT_EQ(NewZmqTransport(3, bad).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(NewZmqTransport(-1).status().code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace strata
