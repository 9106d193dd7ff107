#include "common/own_thread.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace strata {
namespace {

// fn runs on another thread; its Result comes back, a move-only value
// included.
TEST(OwnThreadTest, RunsElsewhereAndReturnsTheResult) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  Result<std::unique_ptr<int>> value =
      OnThreadOfItsOwn([&]() -> Result<std::unique_ptr<int>> {
        ran_on = std::this_thread::get_id();
        return std::make_unique<int>(7);
      });
  ASSERT_TRUE(value.ok()) << value.status().ToString();
  ASSERT_NE(*value, nullptr);
  EXPECT_EQ(**value, 7);
  EXPECT_NE(ran_on, caller);
}

// A failed Status comes back as it was.
TEST(OwnThreadTest, AnErrorComesBackAsItWas) {
  Status st = OnThreadOfItsOwn([] { return Status::NotFound("no {}", "x"); });
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_EQ(st.message(), "no x");
}

// An exception does not cross the threads: it comes back as an Internal
// status with its message.
TEST(OwnThreadTest, AnExceptionComesBackAsAStatus) {
  Result<int> r = OnThreadOfItsOwn([]() -> Result<int> {
    throw std::runtime_error("from the other thread");
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
  EXPECT_NE(r.status().message().find("from the other thread"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace strata
