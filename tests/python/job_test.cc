// The Job under the Python package (src/python/job.h): a long call on its
// own thread, waited for with a timeout, stopped by its flag.
#include "python/job.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

namespace strata {
namespace {

TEST(JobTest, ReturnsTheBodysResult) {
  Job job([](const std::atomic<bool>*) -> Result<std::string> {
    return std::string("{\"ok\":1}");
  });
  ASSERT_TRUE(job.Wait(10));
  auto r = job.Take();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "{\"ok\":1}");
}

TEST(JobTest, WaitTimesOutWhileRunningAndStopEndsTheBody) {
  Job job([](const std::atomic<bool>* stop) -> Result<std::string> {
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stop->load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!stop->load()) return Status::DeadlineExceeded("never stopped");
    return Status::Cancelled("stopped");
  });
  EXPECT_FALSE(job.Wait(0.05));
  EXPECT_FALSE(job.stop_requested());
  EXPECT_EQ(job.Take().status().code(), Status::Code::kFailedPrecondition);
  job.Stop();
  EXPECT_TRUE(job.stop_requested());
  ASSERT_TRUE(job.Wait(10));
  EXPECT_EQ(job.Take().status().code(), Status::Code::kCancelled);
}

TEST(JobTest, AnExceptionComesBackAsAnInternalError) {
  Job job([](const std::atomic<bool>*) -> Result<std::string> {
    throw std::runtime_error("boom in the body");
  });
  ASSERT_TRUE(job.Wait(10));
  auto r = job.Take();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
  EXPECT_NE(r.status().message().find("boom in the body"), std::string::npos);
}

TEST(JobTest, DestroyingARunningJobStopsAndJoinsIt) {
  std::atomic<bool> saw_stop{false};
  {
    Job job([&](const std::atomic<bool>* stop) -> Result<std::string> {
      const auto give_up =
          std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stop->load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
      saw_stop = stop->load();
      return std::string();
    });
  }
  EXPECT_TRUE(saw_stop.load());
}

}  // namespace
}  // namespace strata
