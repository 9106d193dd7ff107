// The process's order of CUDA graph captures (models/cuda_graph.h): the
// lock itself runs on the CPU, so these run everywhere, CI included.
#include "models/cuda_graph.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// Polls `done` for at most `limit`; whether it came true.
bool WaitFor(const std::function<bool()>& done,
             milliseconds limit = milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Replays and eager steps of several workers run side by side: two
// sections are inside at once (each waits, bounded, to see the other).
TEST(CaptureOrderTest, SectionsRunSideBySide) {
  std::atomic<int> inside{0};
  std::atomic<int> saw_both{0};
  auto section = [&] {
    OutsideCaptures([&] {
      ++inside;
      if (WaitFor([&] { return inside.load() == 2; })) ++saw_both;
    });
  };
  std::thread a(section), b(section);
  a.join();
  b.join();
  EXPECT_EQ(saw_both.load(), 2)
      << "the two sections were never inside together";
}

// A capture waits for the sections in hand and runs with none inside; a
// section that comes while it waits goes after it, not before.
TEST(CaptureOrderTest, ACaptureRunsAloneAndAWaitingOneGoesFirst) {
  std::atomic<int> inside{0};
  std::atomic<bool> first_in{false}, release{false};
  std::atomic<int> inside_at_capture{-1};
  Mutex mu;
  std::vector<std::string> order;
  auto record = [&](const std::string& who) {
    MutexLock lock(&mu);
    order.push_back(who);
  };
  auto ran = [&](const std::string& who) {
    MutexLock lock(&mu);
    for (const auto& o : order)
      if (o == who) return true;
    return false;
  };

  std::thread first([&] {
    OutsideCaptures([&] {
      ++inside;
      first_in = true;
      (void)WaitFor([&] { return release.load(); });
      record("first section");
      --inside;
    });
  });
  ASSERT_TRUE(WaitFor([&] { return first_in.load(); }));
  std::thread capture([&] {
    AloneAmongCaptures([&] {
      inside_at_capture = inside.load();
      record("capture");
    });
  });
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(ran("capture")) << "the capture ran beside a section";
  std::thread later([&] {
    OutsideCaptures([&] {
      ++inside;
      record("later section");
      --inside;
    });
  });
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_FALSE(ran("later section"))
      << "a section went ahead of the capture waiting for its turn";
  release = true;
  first.join();
  capture.join();
  later.join();
  EXPECT_EQ(inside_at_capture.load(), 0);
  MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"first section", "capture",
                                             "later section"}));
}

// Captures never overlap one another nor a section.
TEST(CaptureOrderTest, CapturesNeverOverlap) {
  std::atomic<int> captures{0}, sections{0}, overlaps{0};
  auto capture = [&] {
    for (int i = 0; i < 200; ++i) {
      AloneAmongCaptures([&] {
        if (++captures != 1 || sections.load() != 0) ++overlaps;
        std::this_thread::yield();
        --captures;
      });
    }
  };
  auto section = [&] {
    for (int i = 0; i < 200; ++i) {
      OutsideCaptures([&] {
        ++sections;
        if (captures.load() != 0) ++overlaps;
        std::this_thread::yield();
        --sections;
      });
    }
  };
  std::thread a(capture), b(capture), c(section), d(section);
  a.join();
  b.join();
  c.join();
  d.join();
  EXPECT_EQ(overlaps.load(), 0);
}

}  // namespace
}  // namespace strata
