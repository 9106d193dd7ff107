// The emulated network: the link model's schedule (exact, on given
// times), and the shaper applying it over real transports with a clock the
// test moves.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/factory.h"
#include "transport/inproc/transport.h"
#include "transport/shaped/link_model.h"
#include "transport/shaped/transport.h"
#include "transport/zmq/transport.h"

namespace strata {
namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kMs = 1000 * kUs;

// 8 Mbit/s: one byte per microsecond.
LinkSpec BytePerUs(int64_t latency_ns, int64_t jitter_ns = 0) {
  return LinkSpec{8e6, latency_ns, jitter_ns};
}

TEST(LinkModelTest, SerialisesOnOneInterfaceThenPropagates) {
  EgressSchedule egress(1);
  const LinkSpec link = BytePerUs(1 * kMs);
  // To node 1 at 0: 1000 bytes take 1 ms, then 1 ms on the wire.
  Departure a = egress.Schedule(1, link, 1000, 0);
  EXPECT_EQ(a.start_ns, 0);
  EXPECT_EQ(a.end_ns, 1 * kMs);
  EXPECT_EQ(a.arrive_ns, 2 * kMs);
  // To node 2 at 0.2 ms: the interface is busy until 1 ms.
  Departure b = egress.Schedule(2, link, 500, 200 * kUs);
  EXPECT_EQ(b.start_ns, 1 * kMs);
  EXPECT_EQ(b.end_ns, 1500 * kUs);
  EXPECT_EQ(b.arrive_ns, 2500 * kUs);
  // Idle again at 5 ms.
  Departure c = egress.Schedule(1, link, 100, 5 * kMs);
  EXPECT_EQ(c.start_ns, 5 * kMs);
  EXPECT_EQ(c.end_ns, 5100 * kUs);
  EXPECT_EQ(c.arrive_ns, 6100 * kUs);
  // An unlimited link costs only its latency.
  Departure d = egress.Schedule(3, LinkSpec{0, 3 * kMs, 0}, 1 << 20, 10 * kMs);
  EXPECT_EQ(d.end_ns, 10 * kMs);
  EXPECT_EQ(d.arrive_ns, 13 * kMs);
}

TEST(LinkModelTest, JitterKeepsTheOrderOfALinkAndFollowsItsSeed) {
  auto run = [](uint64_t seed) {
    EgressSchedule egress(seed);
    std::vector<Departure> out;
    for (int i = 0; i < 200; ++i) {
      out.push_back(egress.Schedule(i % 2, BytePerUs(1 * kMs, 900 * kUs), 10,
                                    i * 50 * kUs));
    }
    return out;
  };
  const std::vector<Departure> a = run(7), b = run(7), c = run(8);
  int64_t last[2] = {0, 0};
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrive_ns, b[i].arrive_ns);
    differs |= a[i].arrive_ns != c[i].arrive_ns;
    // Within latency +- jitter of its end, and never before the previous
    // message of its link.
    EXPECT_GE(a[i].arrive_ns, a[i].end_ns + 100 * kUs);
    EXPECT_LE(a[i].arrive_ns, std::max(a[i].end_ns + 1900 * kUs, last[i % 2]));
    EXPECT_GE(a[i].arrive_ns, last[i % 2]);
    last[i % 2] = a[i].arrive_ns;
  }
  EXPECT_TRUE(differs);
}

TEST(LinkModelTest, TheReceivingInterfaceTakesOneMessageAtATime) {
  IngressSchedule ingress;
  const LinkSpec link = BytePerUs(0);
  // A lone message is handed over as it arrives.
  EXPECT_EQ(ingress.Deliver(link, 1000, 3 * kMs), 3 * kMs);
  // Three that arrive together at 10 ms (incast): one after another.
  EXPECT_EQ(ingress.Deliver(link, 1000, 10 * kMs), 10 * kMs);
  EXPECT_EQ(ingress.Deliver(link, 1000, 10 * kMs), 11 * kMs);
  EXPECT_EQ(ingress.Deliver(link, 2000, 10 * kMs), 13 * kMs);
  // Back to back from one sender: no second serialisation.
  EXPECT_EQ(ingress.Deliver(link, 1000, 20 * kMs), 20 * kMs);
  EXPECT_EQ(ingress.Deliver(link, 1000, 21 * kMs), 21 * kMs);
}

// A clock the test moves; the shaper looks at it every 0.2 ms.
class ManualClock final : public ShaperClock {
 public:
  int64_t NowNs() const override { return now_.load(); }
  int64_t MaxSleepNs() const override { return 200 * kUs; }
  void Set(int64_t t) { now_ = t; }

 private:
  std::atomic<int64_t> now_{0};
};

Message Sized(uint64_t payload_bytes, int64_t tag) {
  Message m;
  m.header.type = MessageType::kPush;
  m.header.clock = tag;
  m.payloads.push_back(
      Buffer::FromVector(std::vector<char>(payload_bytes, 'x')));
  return m;
}

struct Departed {
  NodeId to;
  uint64_t bytes;
  Departure d;
};

// Two shaped nodes on one fabric, every link 8 Mbit/s and 1 ms.
class ShapedTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_ = std::make_shared<ManualClock>();
    for (NodeId id : {0, 1}) {
      ShapedOptions o;
      o.links = [](NodeId, NodeId) { return BytePerUs(1 * kMs); };
      o.clock = clock_;
      o.on_departure = [this](NodeId to, uint64_t bytes, const Departure& d) {
        std::lock_guard<std::mutex> lock(mu_);
        departed_.push_back({to, bytes, d});
      };
      auto inner = fabric_.NewTransport(id);
      ASSERT_TRUE(inner.ok());
      auto t = NewShapedTransport(std::move(*inner), std::move(o));
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      ASSERT_TRUE((*t)->Bind("inproc://*").ok());
      nodes_[id] = std::move(*t);
    }
    ASSERT_TRUE(nodes_[0]->Connect(1, nodes_[1]->endpoint()).ok());
    ASSERT_TRUE(nodes_[1]->Connect(0, nodes_[0]->endpoint()).ok());
  }

  InProcFabric fabric_;
  std::shared_ptr<ManualClock> clock_;
  std::unique_ptr<Transport> nodes_[2];
  std::mutex mu_;
  std::vector<Departed> departed_;
};

TEST_F(ShapedTransportTest, HoldsAMessageUntilItsScheduleSaysItArrived) {
  // 936 payload bytes + the 64-byte header: 1 ms on the wire.
  ASSERT_TRUE(nodes_[0]->Send(1, Sized(936, 1)).ok());
  ASSERT_TRUE(nodes_[0]->Send(1, Sized(1936, 2)).ok());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_EQ(departed_.size(), 2u);
    EXPECT_EQ(departed_[0].to, 1);
    EXPECT_EQ(departed_[0].bytes, 1000u);
    EXPECT_EQ(departed_[0].d.start_ns, 0);
    EXPECT_EQ(departed_[0].d.end_ns, 1 * kMs);
    EXPECT_EQ(departed_[0].d.arrive_ns, 2 * kMs);
    EXPECT_EQ(departed_[1].d.start_ns, 1 * kMs);
    EXPECT_EQ(departed_[1].d.end_ns, 3 * kMs);
    EXPECT_EQ(departed_[1].d.arrive_ns, 4 * kMs);
  }
  // Not yet due at 1.9 ms.
  clock_->Set(1900 * kUs);
  auto none = nodes_[1]->Recv(std::chrono::milliseconds(30));
  EXPECT_EQ(none.status().code(), Status::Code::kDeadlineExceeded);
  clock_->Set(2 * kMs);
  auto first = nodes_[1]->Recv(std::chrono::milliseconds(5000));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->header.clock, 1);
  EXPECT_EQ(first->header.sender, 0);
  EXPECT_EQ(first->payload_bytes(), 936u);
  EXPECT_EQ(nodes_[1]->Recv(std::chrono::milliseconds(30)).status().code(),
            Status::Code::kDeadlineExceeded);
  clock_->Set(4 * kMs);
  auto second = nodes_[1]->Recv(std::chrono::milliseconds(5000));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->header.clock, 2);
}

TEST_F(ShapedTransportTest, KeepsTheOrderOfALinkAndFeedsTheSink) {
  std::mutex got_mu;
  std::vector<int64_t> got;
  nodes_[1]->SetDirectDelivery([&](Message& m) {
    std::lock_guard<std::mutex> lock(got_mu);
    got.push_back(m.header.clock);
    return true;
  });
  EXPECT_FALSE(nodes_[1]->DeliversOnSendersThreads());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(
        nodes_[0]->Send(1, Sized(static_cast<uint64_t>(i * 37 % 500), i)).ok());
  }
  // The clock moves 100 ms at a time (each message reaches the receiver
  // when its time has come, and its interface then takes one at a time).
  for (int tries = 1; tries < 500; ++tries) {
    clock_->Set(tries * 100 * kMs);
    {
      std::lock_guard<std::mutex> lock(got_mu);
      if (got.size() == 50) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(got_mu);
  ASSERT_EQ(got.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(got[i], i);
  nodes_[1]->SetDirectDelivery(nullptr);
}

TEST_F(ShapedTransportTest, RefusesWhatTheTransportWouldRefuse) {
  EXPECT_EQ(nodes_[0]->Send(7, Sized(10, 0)).code(), Status::Code::kNotFound);
  nodes_[0]->Close();
  EXPECT_EQ(nodes_[0]->Send(1, Sized(10, 0)).code(), Status::Code::kCancelled);
  EXPECT_EQ(nodes_[0]->Recv(std::chrono::milliseconds(0)).status().code(),
            Status::Code::kCancelled);
}

TEST(ShapedTransportCloseTest, CloseSendsWhatIsStillScheduled) {
  InProcFabric fabric;
  auto clock = std::make_shared<ManualClock>();
  std::unique_ptr<Transport> a, b;
  {
    ShapedOptions o;
    o.links = [](NodeId, NodeId) { return BytePerUs(1000 * kMs); };
    o.clock = clock;
    auto inner = fabric.NewTransport(0);
    ASSERT_TRUE(inner.ok());
    auto shaped = NewShapedTransport(std::move(*inner), o);
    ASSERT_TRUE(shaped.ok());
    a = std::move(*shaped);
    auto plain = fabric.NewTransport(1);
    ASSERT_TRUE(plain.ok());
    b = std::move(*plain);
  }
  ASSERT_TRUE(a->Bind("inproc://*").ok());
  ASSERT_TRUE(b->Bind("inproc://*").ok());
  ASSERT_TRUE(a->Connect(1, b->endpoint()).ok());
  ASSERT_TRUE(a->Send(1, Sized(10, 5)).ok());
  a->Close();
  auto m = b->Recv(std::chrono::milliseconds(5000));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->header.clock, 5);
}

// Over ZeroMQ TCP (no direct delivery: the shaper receives from it), with
// the real clock: a message never arrives before its link's latency.
TEST(ShapedTransportZmqTest, ShapesOverTcpToo) {
  TransportOptions options;
  options.links = [](NodeId, NodeId) { return LinkSpec{0, 20 * kMs, 0}; };
  auto a = NewBoundTransport(0, "tcp://127.0.0.1:*", options);
  auto b = NewBoundTransport(1, "tcp://127.0.0.1:*", options);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*a)->Connect(1, (*b)->endpoint()).ok());
  ASSERT_TRUE((*b)->Connect(0, (*a)->endpoint()).ok());
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE((*a)->Send(1, Sized(100, round)).ok());
    auto m = (*b)->Recv(std::chrono::milliseconds(10000));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->header.clock, round);
    EXPECT_GE(std::chrono::steady_clock::now() - t0,
              std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace strata
