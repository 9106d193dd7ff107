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

// Holds a turn on a thread of its own: `enter` (OutsideCaptures or
// AloneAmongCaptures) runs work that marks itself begun and waits (bounded)
// for Release().
class HeldTurn {
 public:
  using Enter = Status (*)(const std::function<void()>&, milliseconds);
  explicit HeldTurn(Enter enter)
      : thread_([this, enter] {
          EXPECT_TRUE(enter(
                          [this] {
                            in_ = true;
                            (void)WaitFor([this] { return release_.load(); });
                          },
                          kCaptureTurnTimeout)
                          .ok());
        }) {}
  ~HeldTurn() { Release(); }
  // Whether the work began (within WaitFor's limit).
  bool Began() {
    return WaitFor([this] { return in_.load(); });
  }
  void Release() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> in_{false}, release_{false};
  std::thread thread_;
};

// Replays and eager steps of several workers run side by side: two
// sections are inside at once (each waits, bounded, to see the other).
TEST(CaptureOrderTest, SectionsRunSideBySide) {
  std::atomic<int> inside{0};
  std::atomic<int> saw_both{0};
  auto section = [&] {
    EXPECT_TRUE(OutsideCaptures([&] {
                  ++inside;
                  if (WaitFor([&] { return inside.load() == 2; })) ++saw_both;
                }).ok());
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
  std::atomic<bool> first_in{false}, release{false}, later_started{false};
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
    EXPECT_TRUE(OutsideCaptures([&] {
                  ++inside;
                  first_in = true;
                  (void)WaitFor([&] { return release.load(); });
                  record("first section");
                  --inside;
                }).ok());
  });
  std::thread capture([&] {
    (void)WaitFor([&] { return first_in.load(); });
    EXPECT_TRUE(AloneAmongCaptures([&] {
                  inside_at_capture = inside.load();
                  record("capture");
                }).ok());
  });
  // The capture is waiting for its turn; only then the later section.
  const bool waiting = WaitFor([] { return CapturesWaiting() == 1; });
  EXPECT_TRUE(waiting) << "the capture never waited for its turn";
  EXPECT_FALSE(ran("capture")) << "the capture ran beside a section";
  std::thread later([&] {
    later_started = true;
    EXPECT_TRUE(OutsideCaptures([&] {
                  ++inside;
                  record("later section");
                  --inside;
                }).ok());
  });
  (void)WaitFor([&] { return later_started.load(); });
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(ran("later section"))
      << "a section went ahead of the capture waiting for its turn";
  release = true;
  first.join();
  capture.join();
  later.join();
  EXPECT_EQ(inside_at_capture.load(), 0);
  EXPECT_EQ(CapturesWaiting(), 0);
  MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"first section", "capture",
                                             "later section"}));
}

// Captures never overlap one another nor a section.
TEST(CaptureOrderTest, CapturesNeverOverlap) {
  std::atomic<int> captures{0}, sections{0}, overlaps{0}, failed{0};
  auto capture = [&] {
    for (int i = 0; i < 200; ++i) {
      if (!AloneAmongCaptures([&] {
             if (++captures != 1 || sections.load() != 0) ++overlaps;
             std::this_thread::yield();
             --captures;
           }).ok())
        ++failed;
    }
  };
  auto section = [&] {
    for (int i = 0; i < 200; ++i) {
      if (!OutsideCaptures([&] {
             ++sections;
             if (captures.load() != 0) ++overlaps;
             std::this_thread::yield();
             --sections;
           }).ok())
        ++failed;
    }
  };
  std::thread a(capture), b(capture), c(section), d(section);
  a.join();
  b.join();
  c.join();
  d.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failed.load(), 0);
}

// No wait for a turn is endless: a capture behind a section that does not
// end, and a section behind a capture that does not end, give up after
// their timeout, naming what they waited for, without running their work;
// a capture that gave up holds nobody back.
TEST(CaptureOrderTest, AWaitForATurnEndsAfterItsTimeout) {
  std::atomic<bool> ran{false};
  HeldTurn section(OutsideCaptures);
  if (!section.Began()) FAIL() << "the section never began";
  Status s = AloneAmongCaptures([&] { ran = true; }, milliseconds(100));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("replays, eager steps and captures"),
            std::string::npos)
      << s.ToString();
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(CapturesWaiting(), 0);
  EXPECT_TRUE(OutsideCaptures([] {}, milliseconds(1000)).ok())
      << "a capture that gave up still holds sections back";
  section.Release();

  HeldTurn capture(AloneAmongCaptures);
  if (!capture.Began()) FAIL() << "the capture never began";
  s = OutsideCaptures([&] { ran = true; }, milliseconds(100));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("capture to end"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(ran.load());
}

}  // namespace
}  // namespace strata
