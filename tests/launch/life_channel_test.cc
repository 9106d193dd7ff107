// The launcher's word to a --processes node after its role ended
// (launch/life_channel.h), over a real socket pair.
#include "launch/life_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "launch/join.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// The launcher's channel to a node: a Unix socket pair, as
// launch/processes.cc makes it.
struct Channel {
  Channel() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~Channel() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void CloseWrite() {
    ::close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(LifeChannelTest, ANextLifeCrossesTheChannelWhole) {
  Channel p;
  const NextLife sent{"tcp://127.0.0.1:4567",
                      {"checkpoint.resume=true", "cluster.workers=3"},
                      2,
                      "[cluster]\nworkers = 3\nmode = \"sync\"\n"};
  ASSERT_TRUE(SendNextLife(p.fds[1], sent).ok());
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->coordinator, sent.coordinator);
  EXPECT_EQ((*got)->overrides, sent.overrides);
  EXPECT_EQ((*got)->index, 2);
  EXPECT_EQ((*got)->config, sent.config);  // a remote node's, on one line
}

TEST(LifeChannelTest, AClosedChannelEndsTheNode) {
  Channel p;
  p.CloseWrite();
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
}

TEST(LifeChannelTest, SilenceRunsOutNamingTheWait) {
  Channel p;
  const auto t0 = std::chrono::steady_clock::now();
  auto got = WaitNextLife(p.fds[0], milliseconds(300), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("the launcher's word"),
            std::string::npos)
      << got.status().message();
}

TEST(LifeChannelTest, AStopEndsTheWait) {
  Channel p;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop = true;
  });
  auto got = WaitNextLife(p.fds[0], milliseconds(10000), &stop);
  stopper.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kCancelled);
}

TEST(LifeChannelTest, AWordToANodeThatDiedFailsWithoutASignal) {
  Channel p;
  ::close(p.fds[0]);
  p.fds[0] = -1;
  Status st = SendNextLife(p.fds[1], NextLife{"tcp://127.0.0.1:1", {}, -1, ""});
  EXPECT_EQ(st.code(), Status::Code::kIoError) << st.ToString();
}

TEST(LifeChannelTest, GarbageIsRefusedNamingIt) {
  Channel p;
  const std::string junk = "{\"coordinator\": 5}\n";
  ASSERT_EQ(::write(p.fds[1], junk.data(), junk.size()),
            static_cast<ssize_t>(junk.size()));
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(got.status().message().find("not a next life"), std::string::npos)
      << got.status().message();
}

// A remote worker's channel (launch/join.h's RemoteLife): a poll asks for
// its next word by count, so a poll repeated after a lost reply gets the
// same word; after the end nothing more comes, and the launcher sees the
// end was taken.
TEST(LifeChannelTest, ARemoteLifeAnswersARepeatedPollTheSame) {
  RemoteLife r(7, "elsewhere", 42);
  bool closed = true;
  EXPECT_EQ(r.Poll(0, &closed), "");
  EXPECT_FALSE(closed);
  r.Send("first\n");
  r.Send("second\n");
  EXPECT_EQ(r.Poll(0, &closed), "first\n");
  EXPECT_EQ(r.Poll(0, &closed), "first\n");  // the reply was lost
  EXPECT_EQ(r.Poll(1, &closed), "second\n");
  EXPECT_EQ(r.Poll(2, &closed), "");
  EXPECT_FALSE(closed);
  EXPECT_FALSE(r.Ended());
  r.Close();
  EXPECT_EQ(r.Poll(1, &closed), "second\n");  // still there once
  EXPECT_FALSE(closed);
  EXPECT_EQ(r.Poll(2, &closed), "");
  EXPECT_TRUE(closed);
  EXPECT_TRUE(r.Ended());
  EXPECT_LT(r.silent_s(), 1.0);
}

// A scale waits for a remote worker's poll for its next life
// (RemoteLife::AwaitPoll): it returns as soon as the worker polls, and
// says false at the bound for one that stays silent (it died between
// lives).
TEST(LifeChannelTest, AScaleSeesARemoteWorkerThatStoppedPolling) {
  using Clock = std::chrono::steady_clock;
  RemoteLife polling(1, "elsewhere", 10), silent(2, "elsewhere", 11);
  std::atomic<bool> stop{false};
  std::thread node([&] {
    std::this_thread::sleep_for(milliseconds(400));  // its life ends
    bool closed = false;
    while (!stop.load()) {
      polling.Poll(0, &closed);
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  std::this_thread::sleep_for(milliseconds(300));
  // Both last polled (joined) 0.3 s ago: neither polls within 0.2 s now.
  auto start = Clock::now();
  EXPECT_TRUE(polling.AwaitPoll(0.2, start + std::chrono::seconds(5)));
  const double waited =
      std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(waited, 0.05);
  EXPECT_LT(waited, 2.0);
  start = Clock::now();
  EXPECT_FALSE(silent.AwaitPoll(0.2, start + milliseconds(500)));
  EXPECT_GE(Clock::now() - start, milliseconds(500));
  stop = true;
  node.join();
}

// A join the run cannot take (launch/join.h) ends the wait with the reason.
TEST(LifeChannelTest, ARefusedJoinEndsTheWaitSayingWhy) {
  Channel p;
  const std::string no = "{\"refused\": \"5 workers is outside\"}\n";
  ASSERT_EQ(::write(p.fds[1], no.data(), no.size()),
            static_cast<ssize_t>(no.size()));
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("did not take this node: 5 workers"),
            std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace strata
