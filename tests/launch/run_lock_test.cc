#include "run/run_lock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/fs.h"
#include "launch/cluster_test_util.h"
#include "launch/scale.h"

namespace strata {
namespace {

using testing_util::TempRoot;

// One holder at a time; a second is refused naming the first's PID; the
// lock is free again once the holder is gone.
TEST(RunLockTest, OneHolderAtATimeAndFreeOnceItEnds) {
  const std::string dir = TempRoot() + "/run";
  ASSERT_TRUE(MakeDirs(dir).ok());
  EXPECT_EQ(RunLock::Probe(dir), RunLock::State::kNone);
  {
    auto first = RunLock::Acquire(dir);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(RunLock::Probe(dir), RunLock::State::kHeld);
    auto second = RunLock::Acquire(dir);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), Status::Code::kFailedPrecondition);
    EXPECT_NE(
        second.status().message().find("pid " + std::to_string(::getpid())),
        std::string::npos)
        << second.status().message();
    // Moved, it is still held.
    RunLock moved = std::move(first).value();
    EXPECT_EQ(RunLock::Probe(dir), RunLock::State::kHeld);
  }
  EXPECT_EQ(RunLock::Probe(dir), RunLock::State::kFree);
  auto again = RunLock::Acquire(dir);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

// `strata scale` of a run that has ended is refused at once, saying how to
// resume it on another count; a local run has no workers to scale. Before,
// both waited out --timeout (120 s) for a coordinator.
TEST(RunLockTest, AScaleOfAnEndedOrLocalRunIsRefusedAtOnce) {
  const std::string root = TempRoot();
  for (const char* mode : {"sync", "local"}) {
    SCOPED_TRACE(mode);
    const std::string dir = root + "/" + mode;
    ASSERT_TRUE(MakeDirs(dir).ok());
    Config c;
    ASSERT_TRUE(c.ApplyOverride(std::string("cluster.mode=") + mode).ok());
    ASSERT_TRUE(c.ApplyOverride("checkpoint.every_updates=10").ok());
    ASSERT_TRUE(c.WriteToml(JoinPath(dir, "config.toml")).ok());
    { ASSERT_TRUE(RunLock::Acquire(dir).ok()); }  // a run that has ended
    auto asked = ScaleRun(dir, 3, std::chrono::seconds(100));
    ASSERT_FALSE(asked.ok());
    if (std::string(mode) == "local") {
      EXPECT_EQ(asked.status().code(), Status::Code::kInvalidArgument);
      EXPECT_NE(asked.status().message().find("local run"), std::string::npos)
          << asked.status().message();
    } else {
      EXPECT_EQ(asked.status().code(), Status::Code::kFailedPrecondition);
      EXPECT_NE(asked.status().message().find("strata train --resume"),
                std::string::npos)
          << asked.status().message();
    }
  }
}

}  // namespace
}  // namespace strata
