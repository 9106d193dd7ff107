// The coordinator's parts alone (barriers.h): a message is kept first, then
// looked at against membership as it is when it is looked at, so a worker
// lost between a message's arrival and the look is not waited for. A
// worker's RPC endpoint sends the requests; the part replies through the
// coordinator's.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "coordinator/barriers.h"
#include "transport/inproc/transport.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// Node 0 hands what it receives to `handle`; node 1 asks.
struct TwoEndpoints {
  InProcFabric fabric;
  std::unique_ptr<RpcEndpoint> coordinator, worker;
  std::function<void(Message)> handle;

  TwoEndpoints() {
    auto t0 = fabric.NewTransport(0);
    auto t1 = fabric.NewTransport(1);
    EXPECT_TRUE(t0.ok() && t1.ok());
    EXPECT_TRUE((*t0)->Bind("inproc://c").ok());
    EXPECT_TRUE((*t1)->Bind("inproc://w").ok());
    coordinator = std::make_unique<RpcEndpoint>(
        std::move(*t0), [this](Message m) { handle(std::move(m)); });
    worker = std::make_unique<RpcEndpoint>(std::move(*t1), [](Message) {});
    EXPECT_TRUE(worker->transport().Connect(0, "inproc://c").ok());
    EXPECT_TRUE(coordinator->transport().Connect(1, "inproc://w").ok());
    coordinator->Start();
    worker->Start();
  }
  ~TwoEndpoints() {
    worker->Stop();
    coordinator->Stop();
  }
};

TEST(BarriersTest, AWorkerLostAfterTheArrivalIsNotWaitedFor) {
  TwoEndpoints e;
  Barriers barriers(*e.coordinator);
  std::atomic<int> kept{0};
  e.handle = [&](Message m) {
    barriers.Arrive(std::move(m));
    ++kept;
  };
  Message m;
  m.header.type = MessageType::kBarrier;
  m.header.clock = 0;
  auto call = e.worker->Request(0, std::move(m));
  for (int i = 0; i < 200 && kept.load() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(kept.load(), 1);
  // Membership before the loss: worker 2 (node 2) has not arrived.
  barriers.Release(WorkerSet{{1, 2}, {}});
  EXPECT_EQ(call->Wait(milliseconds(100)).status().code(),
            Status::Code::kDeadlineExceeded);
  // After it: node 2 was lost; the barrier goes.
  barriers.Release(WorkerSet{{1}, {}});
  auto released = call->Wait(milliseconds(2000));
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ(released->header.type, MessageType::kBarrierRelease);
  EXPECT_NE(barriers.TrainingStart(), std::chrono::steady_clock::time_point{});
}

TEST(ClockTableTest, AClockHeldBackByALostWorkerIsGrantedOnTheNextLook) {
  TwoEndpoints e;
  ClockTable clocks(*e.coordinator, /*staleness=*/0);
  std::atomic<int> kept{0};
  e.handle = [&](Message m) {
    clocks.Request(std::move(m));
    ++kept;
  };
  Message m;
  m.header.type = MessageType::kClock;
  m.header.clock = 3;  // worker 1 completed 3 iterations
  auto call = e.worker->Request(0, std::move(m));
  for (int i = 0; i < 200 && kept.load() == 0; ++i)
    std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(kept.load(), 1);
  // Node 2 is at clock 0: with s = 0 worker 1 waits.
  clocks.Grant(WorkerSet{{1, 2}, {}});
  EXPECT_EQ(call->Wait(milliseconds(100)).status().code(),
            Status::Code::kDeadlineExceeded);
  // Node 2 finished: it holds nobody back.
  clocks.Finished(2);
  clocks.Grant(WorkerSet{{1, 2}, {2}});
  auto granted = call->Wait(milliseconds(2000));
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  EXPECT_EQ(granted->header.clock, 3);
}

}  // namespace
}  // namespace strata
