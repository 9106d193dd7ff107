// Behaviour every Transport backend must share, run over inproc, tcp and ipc.
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "transport/backends.h"
#include "transport/inproc/transport.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kWait{5000};  // generous: CI machines can be slow

using test_backends::Backend;
using test_backends::BackendName;

Buffer Pattern(size_t size, uint8_t seed) {
  Buffer b = Buffer::Allocate(size);
  for (size_t i = 0; i < size; ++i) {
    b.data()[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 12));
  }
  return b;
}

::testing::AssertionResult SamePattern(const Buffer& b, size_t size,
                                       uint8_t seed) {
  if (b.size() != size) {
    return ::testing::AssertionFailure()
           << "size " << b.size() << ", expected " << size;
  }
  for (size_t i = 0; i < size; ++i) {
    if (b.data()[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 12))) {
      return ::testing::AssertionFailure() << "byte " << i << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

Message Make(MessageType type, uint64_t request_id) {
  Message m;
  m.header.type = type;
  m.header.request_id = request_id;
  return m;
}

Message Make(MessageType type, uint64_t request_id, Buffer payload) {
  Message m = Make(type, request_id);
  m.payloads.push_back(std::move(payload));
  return m;
}

class TransportTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { STRATA_SKIP_IF_BACKEND_MISSING(GetParam()); }

  // A node bound to a fresh local endpoint.
  std::unique_ptr<Transport> NewNode(NodeId id) {
    return test_backends::NewBoundNode(GetParam(), id, fabric_);
  }

  static void Link(Transport& from, const Transport& to) {
    Status s = from.Connect(to.node_id(), to.endpoint());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  InProcFabric fabric_;
};

TEST_P(TransportTest, RoundTripOfHeaderAndPayloads) {
  auto a = NewNode(1);
  auto b = NewNode(2);
  Link(*a, *b);
  const std::vector<size_t> sizes = {0, 1, 4096, (size_t{3} << 20) + 7};
  Message m;
  m.header.type = MessageType::kPush;
  m.header.flags = 0xBEEF;
  m.header.request_id = 123456789012345ull;
  m.header.key_begin = 1000;
  m.header.key_end = 1000 + (3 << 20);
  m.header.clock = -3;
  m.header.sender = 77;  // overwritten by the transport
  for (size_t i = 0; i < sizes.size(); ++i) {
    m.payloads.push_back(Pattern(sizes[i], static_cast<uint8_t>(i)));
  }
  ASSERT_TRUE(a->Send(2, std::move(m)).ok());

  Result<Message> got = b->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const MessageHeader& h = got->header;
  EXPECT_EQ(h.type, MessageType::kPush);
  EXPECT_EQ(h.flags, 0xBEEFu);
  EXPECT_EQ(h.sender, 1);
  EXPECT_EQ(h.receiver, 2);
  EXPECT_EQ(h.request_id, 123456789012345ull);
  EXPECT_EQ(h.key_begin, 1000);
  EXPECT_EQ(h.key_end, 1000 + (3 << 20));
  EXPECT_EQ(h.clock, -3);
  ASSERT_EQ(got->payloads.size(), sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(
        SamePattern(got->payloads[i], sizes[i], static_cast<uint8_t>(i)))
        << "payload " << i;
    if (sizes[i] >= 8) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got->payloads[i].data()) % 8, 0u);
    }
  }
  TransportStats sa = a->stats(), sb = b->stats();
  EXPECT_EQ(sa.messages_sent, 1u);
  EXPECT_EQ(sb.messages_received, 1u);
  EXPECT_EQ(sb.payload_bytes_received, 4096u + 1 + (3u << 20) + 7);
  EXPECT_EQ(sb.messages_dropped, 0u);
}

TEST_P(TransportTest, ManyMessagesArriveInOrder) {
  auto a = NewNode(1);
  auto b = NewNode(2);
  Link(*a, *b);
  constexpr int kCount = 400;
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      // Every 50th message is multi-frame, so segments of big and small
      // messages share the connection.
      const size_t size = i % 50 == 0 ? (size_t{3} << 19) : 16;
      Status s = a->Send(2, Make(MessageType::kPush, i,
                                 Pattern(size, static_cast<uint8_t>(i))));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  });
  for (int i = 0; i < kCount; ++i) {
    Result<Message> got = b->Recv(kWait);
    ASSERT_TRUE(got.ok()) << "message " << i << ": " << got.status().ToString();
    ASSERT_EQ(got->header.request_id, static_cast<uint64_t>(i));
    const size_t size = i % 50 == 0 ? (size_t{3} << 19) : 16;
    ASSERT_TRUE(
        SamePattern(got->payloads.at(0), size, static_cast<uint8_t>(i)));
  }
  sender.join();
}

TEST_P(TransportTest, TwoSendersToOneReceiver) {
  auto a = NewNode(1);
  auto b = NewNode(2);
  auto c = NewNode(3);
  Link(*a, *c);
  Link(*b, *c);
  constexpr int kEach = 200;
  auto send_all = [&](Transport* t) {
    for (int i = 0; i < kEach; ++i) {
      const size_t size = i % 40 == 0 ? (size_t{2} << 20) + 3 : 100;
      Status s = t->Send(3, Make(MessageType::kPush, i,
                                 Pattern(size, static_cast<uint8_t>(i))));
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  };
  std::thread ta(send_all, a.get());
  std::thread tb(send_all, b.get());
  std::map<NodeId, uint64_t> next;
  for (int i = 0; i < 2 * kEach; ++i) {
    Result<Message> got = c->Recv(kWait);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const NodeId from = got->header.sender;
    ASSERT_TRUE(from == 1 || from == 2) << from;
    ASSERT_EQ(got->header.request_id, next[from]) << "from node " << from;
    const size_t size = next[from] % 40 == 0 ? (size_t{2} << 20) + 3 : 100;
    ASSERT_TRUE(SamePattern(got->payloads.at(0), size,
                            static_cast<uint8_t>(next[from])));
    ++next[from];
  }
  ta.join();
  tb.join();
  EXPECT_EQ(next[1], static_cast<uint64_t>(kEach));
  EXPECT_EQ(next[2], static_cast<uint64_t>(kEach));
}

TEST_P(TransportTest, RequestReplyBothWays) {
  auto server = NewNode(0);
  auto worker = NewNode(5);
  Link(*worker, *server);
  Link(*server, *worker);
  std::thread serve([&] {
    for (int i = 0; i < 20; ++i) {
      Result<Message> req = server->Recv(kWait);
      ASSERT_TRUE(req.ok()) << req.status().ToString();
      Message reply = Make(MessageType::kPullReply, req->header.request_id,
                           Pattern(1 << 20, 9));
      ASSERT_TRUE(server->Send(req->header.sender, std::move(reply)).ok());
    }
  });
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        worker->Send(0, Make(MessageType::kPullRequest, 1000 + i)).ok());
    Result<Message> reply = worker->Recv(kWait);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->header.request_id, 1000u + i);
    EXPECT_EQ(reply->header.sender, 0);
    EXPECT_TRUE(SamePattern(reply->payloads.at(0), 1 << 20, 9));
  }
  serve.join();
}

TEST_P(TransportTest, SendToSelf) {
  auto a = NewNode(4);
  Link(*a, *a);
  ASSERT_TRUE(a->Send(4, Make(MessageType::kHeartbeat, 1)).ok());
  Result<Message> got = a->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.type, MessageType::kHeartbeat);
}

TEST_P(TransportTest, RecvTimesOutQuicklyAndSaysWhy) {
  auto a = NewNode(9);
  const auto start = Clock::now();
  Result<Message> got = a->Recv(milliseconds(50));
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_GE(elapsed, milliseconds(45));
  EXPECT_LT(elapsed, milliseconds(1000));
  const std::string& why = got.status().message();
  EXPECT_NE(why.find("node 9"), std::string::npos) << why;
  EXPECT_NE(why.find(a->endpoint()), std::string::npos) << why;
  EXPECT_NE(why.find("50 ms"), std::string::npos) << why;

  // A zero timeout only polls.
  const auto poll_start = Clock::now();
  EXPECT_EQ(a->Recv(milliseconds(0)).status().code(),
            Status::Code::kDeadlineExceeded);
  EXPECT_LT(Clock::now() - poll_start, milliseconds(200));
}

TEST_P(TransportTest, RejectsBadCalls) {
  auto a = NewNode(1);
  Status s = a->Send(42, Make(MessageType::kPush, 1));
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("42"), std::string::npos);

  auto b = NewNode(2);
  Link(*a, *b);
  Message bad_range = Make(MessageType::kPush, 1);
  bad_range.header.key_begin = 10;
  bad_range.header.key_end = 5;
  EXPECT_EQ(a->Send(2, std::move(bad_range)).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(a->Send(2, Make(MessageType::kInvalid, 1)).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(a->Connect(-1, b->endpoint()).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(a->Connect(3, "http://example.com").code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(a->Bind(a->endpoint()).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(a->Disconnect(77).code(), Status::Code::kNotFound);
  EXPECT_TRUE(a->Disconnect(2).ok());
  EXPECT_EQ(a->Send(2, Make(MessageType::kPush, 1)).code(),
            Status::Code::kNotFound);
}

TEST_P(TransportTest, RecvBeforeBindFails) {
  std::unique_ptr<Transport> t = test_backends::NewNode(GetParam(), 1, fabric_);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->endpoint(), "");
  EXPECT_EQ(t->Recv(milliseconds(10)).status().code(),
            Status::Code::kFailedPrecondition);
}

TEST_P(TransportTest, CloseWakesReceiverAndFailsLaterCalls) {
  auto a = NewNode(1);
  Link(*a, *a);
  std::atomic<bool> returned{false};
  Status recv_status;
  std::thread receiver([&] {
    recv_status = a->Recv(kWait).status();
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  a->Close();
  receiver.join();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_TRUE(returned);
  EXPECT_EQ(recv_status.code(), Status::Code::kCancelled)
      << recv_status.ToString();
  EXPECT_EQ(a->Send(1, Make(MessageType::kPush, 1)).code(),
            Status::Code::kCancelled);
  EXPECT_EQ(a->Recv(milliseconds(1)).status().code(), Status::Code::kCancelled);
  a->Close();  // idempotent
}

TEST_P(TransportTest, SendBeforePeerIsUp) {
  // The peer's endpoint is known but nobody listens there yet: the message
  // waits and is delivered once the peer binds.
  std::string endpoint;
  std::unique_ptr<Transport> b;
  if (GetParam() == Backend::kInProc) {
    endpoint = "inproc://late";
    b = std::move(fabric_.NewTransport(2)).value();
  } else if (GetParam() == Backend::kIpc) {
    endpoint = "ipc:///tmp/strata-transport-test-" +
               std::to_string(::getpid()) + "-late";
    b = std::move(NewZmqTransport(2)).value();
  } else {
    GTEST_SKIP() << "a tcp (or ucx) port cannot be reserved race-free "
                    "before binding";
  }
  auto a = NewNode(1);
  ASSERT_TRUE(a->Connect(2, endpoint).ok());
  ASSERT_TRUE(a->Send(2, Make(MessageType::kRegister, 5)).ok());
  std::this_thread::sleep_for(milliseconds(30));
  ASSERT_TRUE(b->Bind(endpoint).ok());
  Result<Message> got = b->Recv(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.request_id, 5u);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest,
                         ::testing::Values(Backend::kInProc, Backend::kTcp,
                                           Backend::kIpc, Backend::kUcx,
                                           Backend::kUcxTcp),
                         BackendName);

// In-process specifics.

TEST(InProcTransportTest, PayloadsChangeOwnerWithoutCopy) {
  InProcFabric fabric;
  auto a = std::move(fabric.NewTransport(1)).value();
  auto b = std::move(fabric.NewTransport(2)).value();
  ASSERT_TRUE(b->Bind("inproc://b").ok());
  ASSERT_TRUE(a->Connect(2, "inproc://b").ok());
  Message m = Make(MessageType::kPush, 1, Buffer::Allocate(64 << 20));
  m.payloads.push_back(Buffer::Allocate(100));
  const uint8_t* p0 = m.payloads[0].data();
  const uint8_t* p1 = m.payloads[1].data();
  ASSERT_TRUE(a->Send(2, std::move(m)).ok());
  Result<Message> got = b->Recv(kWait);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->payloads[0].data(), p0);
  EXPECT_EQ(got->payloads[1].data(), p1);
}

TEST(InProcTransportTest, FabricsAreIndependent) {
  InProcFabric one, two;
  auto a1 = std::move(one.NewTransport(1)).value();
  auto b1 = std::move(one.NewTransport(2)).value();
  auto b2 = std::move(two.NewTransport(2)).value();
  ASSERT_TRUE(b1->Bind("inproc://server").ok());
  ASSERT_TRUE(b2->Bind("inproc://server").ok());  // same name, other fabric
  ASSERT_TRUE(a1->Connect(2, "inproc://server").ok());
  ASSERT_TRUE(a1->Send(2, Make(MessageType::kPush, 1)).ok());
  EXPECT_TRUE(b1->Recv(kWait).ok());
  EXPECT_EQ(b2->Recv(milliseconds(20)).status().code(),
            Status::Code::kDeadlineExceeded);
  // Within one fabric a name has one owner.
  auto c1 = std::move(one.NewTransport(3)).value();
  EXPECT_EQ(c1->Bind("inproc://server").code(), Status::Code::kUnavailable);
}

TEST(InProcTransportTest, SendToClosedPeerIsUnavailable) {
  InProcFabric fabric;
  auto a = std::move(fabric.NewTransport(1)).value();
  auto b = std::move(fabric.NewTransport(2)).value();
  ASSERT_TRUE(b->Bind("inproc://b").ok());
  ASSERT_TRUE(a->Connect(2, "inproc://b").ok());
  b->Close();
  EXPECT_EQ(a->Send(2, Make(MessageType::kPush, 1)).code(),
            Status::Code::kUnavailable);
  // A restarted node on the same name is found again.
  auto b2 = std::move(fabric.NewTransport(2)).value();
  ASSERT_TRUE(b2->Bind("inproc://b").ok());
  ASSERT_TRUE(a->Send(2, Make(MessageType::kPush, 2)).ok());
  EXPECT_TRUE(b2->Recv(kWait).ok());
}

TEST(InProcTransportTest, FullInboxTimesOut) {
  InProcFabric fabric;
  InProcOptions options;
  options.max_queued_messages = 2;
  options.send_timeout = milliseconds(30);
  auto a = std::move(fabric.NewTransport(1, options)).value();
  auto b = std::move(fabric.NewTransport(2)).value();
  ASSERT_TRUE(b->Bind("inproc://b").ok());
  ASSERT_TRUE(a->Connect(2, "inproc://b").ok());
  ASSERT_TRUE(a->Send(2, Make(MessageType::kPush, 1)).ok());
  ASSERT_TRUE(a->Send(2, Make(MessageType::kPush, 2)).ok());
  Status s = a->Send(2, Make(MessageType::kPush, 3));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(s.message().find("inproc://b"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// In-process fast path (Transport::SetDirectDelivery): a message the sink
// takes skips the receiver's queue; one it declines, or any after the sink
// is removed, is queued as usual. RpcEndpoint uses it for replies.
TEST(InProcDirectDeliveryTest, SinkTakesOrDeclinesAndCanBeRemoved) {
  InProcFabric fabric;
  auto a = fabric.NewTransport(1);
  auto b = fabric.NewTransport(2);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Bind("inproc://a").ok());
  ASSERT_TRUE((*b)->Bind("inproc://b").ok());
  ASSERT_TRUE((*a)->Connect(2, "inproc://b").ok());
  std::vector<int64_t> taken;
  (*b)->SetDirectDelivery([&taken](Message& m) {
    if (m.header.clock % 2 != 0) return false;  // odd clocks: declined
    taken.push_back(m.header.clock);
    return true;
  });
  for (int64_t c = 0; c < 4; ++c) {
    Message m;
    m.header.type = MessageType::kPush;
    m.header.clock = c;
    ASSERT_TRUE((*a)->Send(2, std::move(m)).ok());
  }
  EXPECT_EQ(taken, (std::vector<int64_t>{0, 2}));
  for (int64_t want : {1, 3}) {
    auto got = (*b)->Recv(std::chrono::milliseconds(1000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->header.clock, want);
  }
  (*b)->SetDirectDelivery(nullptr);
  Message m;
  m.header.type = MessageType::kPush;
  m.header.clock = 8;
  ASSERT_TRUE((*a)->Send(2, std::move(m)).ok());
  auto got = (*b)->Recv(std::chrono::milliseconds(1000));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->header.clock, 8);
  EXPECT_EQ(taken.size(), 2u);
}

}  // namespace
}  // namespace strata
