// The launcher's word to a --processes node after its role ended
// (launch/life_channel.h), over a real pipe.
#include "launch/life_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace strata {
namespace {

using std::chrono::milliseconds;

struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void CloseWrite() {
    ::close(fds[1]);
    fds[1] = -1;
  }
  int fds[2] = {-1, -1};
};

TEST(LifeChannelTest, ANextLifeCrossesThePipeWhole) {
  Pipe p;
  const NextLife sent{"tcp://127.0.0.1:4567",
                      {"checkpoint.resume=true", "cluster.workers=3"},
                      2};
  ASSERT_TRUE(SendNextLife(p.fds[1], sent).ok());
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->coordinator, sent.coordinator);
  EXPECT_EQ((*got)->overrides, sent.overrides);
  EXPECT_EQ((*got)->index, 2);
}

TEST(LifeChannelTest, AClosedPipeEndsTheNode) {
  Pipe p;
  p.CloseWrite();
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
}

TEST(LifeChannelTest, SilenceRunsOutNamingTheWait) {
  Pipe p;
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
  Pipe p;
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

TEST(LifeChannelTest, GarbageIsRefusedNamingIt) {
  Pipe p;
  const std::string junk = "{\"coordinator\": 5}\n";
  ASSERT_EQ(::write(p.fds[1], junk.data(), junk.size()),
            static_cast<ssize_t>(junk.size()));
  auto got = WaitNextLife(p.fds[0], milliseconds(2000), nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(got.status().message().find("not a next life"), std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace strata
