#include "exchange/bucket_reducer.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {
namespace {

using std::chrono::milliseconds;

// A reduction that doubles its bucket and records the order of buckets.
struct Recorder {
  std::mutex mu;
  std::vector<size_t> sizes;
  std::vector<float> firsts;
  BucketReducer::ReduceFn Fn() {
    return [this](float* data, size_t n) {
      std::lock_guard<std::mutex> lock(mu);
      sizes.push_back(n);
      firsts.push_back(data[0]);
      for (size_t i = 0; i < n; ++i) data[i] *= 2;
      return Status::Ok();
    };
  }
};

TEST(BucketReducerTest, ReducesEveryBucketLastFirstAndZeroFillsMissing) {
  Recorder rec;
  BucketReducer r(10, 4, rec.Fn());  // buckets [0,4) [4,8) [8,10)
  EXPECT_EQ(r.num_buckets(), 3);
  r.BeginStep();
  const std::vector<float> g = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  // A parameter spanning two buckets, reported first; then [0, 3) only:
  // float 3 never gets a gradient in this step.
  r.Ready(6, g.data() + 6, 4);
  r.Ready(0, g.data(), 3);
  r.Ready(3 + 1, g.data() + 4, 2);
  ASSERT_TRUE(r.FinishStep(milliseconds(2000)).ok());
  EXPECT_EQ(rec.sizes, (std::vector<size_t>{2, 4, 4}));
  EXPECT_EQ(rec.firsts, (std::vector<float>{9, 5, 1}));
  const std::vector<float> want = {2, 4, 6, 0, 10, 12, 14, 16, 18, 20};
  EXPECT_EQ(std::vector<float>(r.data(), r.data() + 10), want);
  // The next step starts from zero.
  r.BeginStep();
  r.Ready(0, g.data(), 10);
  ASSERT_TRUE(r.FinishStep(milliseconds(2000)).ok());
  EXPECT_FLOAT_EQ(r.data()[3], 8.0f);
}

TEST(BucketReducerTest, AGradientAfterItsBucketWasSentIsAnError) {
  Recorder rec;
  BucketReducer r(4, 2, rec.Fn());
  r.BeginStep();
  const std::vector<float> g = {1, 1, 1, 1};
  r.Ready(2, g.data() + 2, 2);
  r.Ready(0, g.data(), 2);
  ASSERT_TRUE(r.FinishStep(milliseconds(2000)).ok());
  // Second use of [2, 4) in the same step: its bucket is long gone.
  r.Ready(2, g.data() + 2, 2);
  r.BeginStep();
  r.Ready(2, g.data() + 2, 2);
  r.Ready(2, g.data() + 2, 2);  // before launch? maybe: either adds or errs
  r.Ready(0, g.data(), 2);
  Status st = r.FinishStep(milliseconds(2000));
  if (st.ok()) {
    EXPECT_FLOAT_EQ(r.data()[2], 4.0f);  // both arrived in time: 2 x (1 + 1)
  } else {
    EXPECT_NE(st.message().find("bucket_overlap"), std::string::npos);
  }
}

TEST(BucketReducerTest, AFailedReductionIsReturnedNamingTheBucket) {
  BucketReducer r(
      4, 2, [](float*, size_t) { return Status::Unavailable("peer lost"); });
  r.BeginStep();
  const std::vector<float> g = {1, 1, 1, 1};
  r.Ready(0, g.data(), 4);
  Status st = r.FinishStep(milliseconds(2000));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("peer lost"), std::string::npos);
  EXPECT_NE(st.message().find("bucket 1 of 2"), std::string::npos);
  // The thread is done with the step: what it sent into may go.
  EXPECT_TRUE(r.idle());
}

// A reduction still running when FinishStep() gives up: the reducer is not
// idle, so the caller keeps what the reduction uses.
TEST(BucketReducerTest, NotIdleWhileAReductionRuns) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  BucketReducer r(2, 2, [released](float*, size_t) {
    released.wait();
    return Status::Ok();
  });
  r.BeginStep();
  const std::vector<float> g = {1, 1};
  r.Ready(0, g.data(), 2);
  Status st = r.FinishStep(milliseconds(50));
  EXPECT_EQ(st.code(), Status::Code::kDeadlineExceeded) << st.ToString();
  EXPECT_FALSE(r.idle());
  release.set_value();
  EXPECT_TRUE(r.FinishStep(milliseconds(5000)).ok());
  EXPECT_TRUE(r.idle());
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// In place (the parameter-server pipeline): buckets with given bounds over
// the caller's gradient buffer. Ready() only counts (the gradient is in the
// buffer already); a bucket is handed to the reduction, as a pointer into
// that buffer, once every float of it has been reported, last bucket first;
// nothing is cleared between steps (the worker zeroes its gradients).
TEST(BucketReducerTest, InPlaceBucketsAreTheCallersBufferCountedNotCopied) {
  std::vector<float> grads = {1, 2, 3, 4, 5, 6, 7};
  auto owner = std::make_shared<int>(0);
  std::mutex mu;
  std::vector<std::pair<const float*, size_t>> seen;
  BucketReducer r(
      {0, 2, 5, 7},
      [&](float* data, size_t n) {
        std::lock_guard<std::mutex> lock(mu);
        seen.emplace_back(data, n);
        return Status::Ok();
      },
      grads.data(), owner);
  EXPECT_TRUE(r.in_place());
  EXPECT_EQ(r.data(), grads.data());
  EXPECT_EQ(r.owner(), owner);
  r.BeginStep();
  r.Ready(5, nullptr, 2);
  r.Ready(2, nullptr, 2);  // bucket 1 still misses float 4
  r.Ready(0, nullptr, 2);
  {
    // Bucket 2 went; bucket 1 waits for its last float (and holds up
    // bucket 0, which goes after it).
    std::this_thread::sleep_for(milliseconds(50));
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].first, grads.data() + 5);
  }
  r.Ready(4, nullptr, 1);
  ASSERT_TRUE(r.FinishStep(milliseconds(2000)).ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].first, grads.data() + 2);
  EXPECT_EQ(seen[1].second, 3u);
  EXPECT_EQ(seen[2].first, grads.data());
  EXPECT_EQ(seen[2].second, 2u);
  EXPECT_EQ(grads, (std::vector<float>{1, 2, 3, 4, 5, 6, 7}));
  r.BeginStep();
  EXPECT_EQ(grads, (std::vector<float>{1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(r.FinishStep(milliseconds(2000)).ok());
}

// set_caller_finishes (the parameter-server pipeline): the reducer's thread
// takes a full bucket while an earlier one still waits for gradients; what
// it has not begun when FinishStep() is called is reduced on the calling
// thread, still last bucket first and each bucket once; the next step
// starts over with the reducer's thread.
TEST(BucketReducerTest, TheCallerReducesWhatIsLeftWhenItFinishes) {
  std::vector<float> grads(7, 1.0f);
  std::mutex mu;
  std::vector<std::pair<int64_t, std::thread::id>> seen;  // offset, thread
  BucketReducer r(
      {0, 2, 5, 7},
      [&](float* data, size_t) {
        std::lock_guard<std::mutex> lock(mu);
        seen.emplace_back(data - grads.data(), std::this_thread::get_id());
        return Status::Ok();
      },
      grads.data(), std::make_shared<int>(0));
  r.set_caller_finishes(true);
  const std::thread::id me = std::this_thread::get_id();
  auto seen_now = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  };
  // A new step whose bucket 2 fills while the backward pass goes on: the
  // reducer's thread sends it.
  auto begin_and_send_bucket_2 = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.clear();
    }
    r.BeginStep();
    r.Ready(5, nullptr, 2);
    const auto end = std::chrono::steady_clock::now() + milliseconds(5000);
    while (seen_now() < 1 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(milliseconds(1));
  };
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    // Buckets 1 and 0 (part of 0 never reported) are left.
    begin_and_send_bucket_2();
    r.Ready(2, nullptr, 3);
    if (step == 2) r.Ready(0, nullptr, 1);
    ASSERT_TRUE(r.FinishStep(milliseconds(5000)).ok());
    EXPECT_TRUE(r.idle());
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].first, 5);
    EXPECT_NE(seen[0].second, me);
    // Bucket 1 may have gone from either thread (it was full before
    // FinishStep()); bucket 0 is never full: the caller sends it.
    EXPECT_EQ(seen[1].first, 2);
    EXPECT_EQ(seen[2].first, 0);
    EXPECT_EQ(seen[2].second, me);
  }
  // Buckets 1 and 0 full at once (the backward pass's last layers): the
  // reducer's thread leaves both to the caller, who is about to finish.
  begin_and_send_bucket_2();
  r.Ready(0, nullptr, 2);
  r.Ready(2, nullptr, 3);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(seen_now(), 1u);
  ASSERT_TRUE(r.FinishStep(milliseconds(5000)).ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_NE(seen[0].second, me);
  EXPECT_EQ(seen[1].first, 2);
  EXPECT_EQ(seen[1].second, me);
  EXPECT_EQ(seen[2].first, 0);
  EXPECT_EQ(seen[2].second, me);
}

// What a reducer sent: each bucket's offset into `base`, in the order
// sent, and the thread that sent it.
struct SendLog {
  explicit SendLog(const float* base) : base(base) {}
  void Record(const float* data) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(data - base);
    by.push_back(std::this_thread::get_id());
  }
  std::vector<int64_t> Seen() {
    std::lock_guard<std::mutex> lock(mu);
    return seen;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu);
    seen.clear();
    by.clear();
  }
  const float* base;
  std::mutex mu;
  std::vector<int64_t> seen;
  std::vector<std::thread::id> by;
};

// A reducer over buckets [0, 2) [2, 4) [4, 6) [6, 9) of `grads`, in place,
// the caller finishing, with set_fill_order and set_send_on_fill as given;
// each send is recorded in `log` and answered by `answer` (OK if null).
std::unique_ptr<BucketReducer> RecordingReducer(
    std::vector<float>& grads, SendLog& log, bool fill_order, bool send_on_fill,
    std::function<Status(const float*)> answer = nullptr) {
  auto r = std::make_unique<BucketReducer>(
      std::vector<int64_t>{0, 2, 4, 6, 9},
      [&log, answer](float* data, size_t) {
        log.Record(data);
        return answer ? answer(data) : Status::Ok();
      },
      grads.data(), std::make_shared<int>(0));
  r->set_caller_finishes(true);
  r->set_fill_order(fill_order);
  r->set_send_on_fill(send_on_fill);
  return r;
}

// set_fill_order (parameter-server pushes): buckets go in the order they
// fill, the first to fill first, whatever their place; the reducer's thread
// takes them while the backward pass goes on, the caller the rest, then any
// bucket that got no gradient. Without it (the control) the same reports go
// last bucket first.
TEST(BucketReducerTest, FillOrderSendsBucketsInTheOrderTheyFill) {
  for (const bool fill_order : {true, false}) {
    SCOPED_TRACE(fill_order);
    std::vector<float> grads(9, 1.0f);
    SendLog log(grads.data());
    std::unique_ptr<BucketReducer> reducer =
        RecordingReducer(grads, log, fill_order, /*send_on_fill=*/false);
    BucketReducer& r = *reducer;
    auto wait_for = [&](size_t n) {
      const auto end = std::chrono::steady_clock::now() + milliseconds(5000);
      while (log.Seen().size() < n && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(milliseconds(1));
    };
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      log.Clear();
      r.BeginStep();
      // The last bucket (a late layer), then a sliced first layer's slices
      // first to last: buckets 0 and 1; bucket 2 never gets a gradient.
      r.Ready(6, nullptr, 3);
      if (fill_order) wait_for(1);
      r.Ready(0, nullptr, 2);
      if (fill_order) wait_for(2);
      r.Ready(2, nullptr, 2);
      ASSERT_TRUE(r.FinishStep(milliseconds(5000)).ok());
      EXPECT_EQ(log.Seen(), fill_order ? (std::vector<int64_t>{6, 0, 2, 4})
                                       : (std::vector<int64_t>{6, 4, 2, 0}));
      // The first two went from the reducer's thread as they filled, while
      // the backward pass went on; the zero bucket from the caller's.
      std::lock_guard<std::mutex> lock(log.mu);
      const std::vector<std::thread::id>& by = log.by;
      ASSERT_EQ(by.size(), 4u);
      if (fill_order) {
        EXPECT_NE(by[0], std::this_thread::get_id());
        EXPECT_NE(by[1], std::this_thread::get_id());
      }
      EXPECT_EQ(by[3], std::this_thread::get_id());
    }
  }
}

// set_send_on_fill (parameter-server pushes over a network transport): each
// bucket goes from the thread that filled it, before Ready() returns, in
// the order they fill; FinishStep() sends only the buckets that got no
// gradient. A failed send stops the sending and is returned naming the
// bucket.
TEST(BucketReducerTest, SendOnFillSendsEachBucketFromTheFillingThreadAtOnce) {
  std::vector<float> grads(9, 1.0f);
  SendLog log(grads.data());
  bool fail_first = false;
  std::unique_ptr<BucketReducer> reducer =
      RecordingReducer(grads, log, /*fill_order=*/true, /*send_on_fill=*/true,
                       [&](const float* d) {
                         return fail_first && d == grads.data()
                                    ? Status::Unavailable("server lost")
                                    : Status::Ok();
                       });
  BucketReducer& r = *reducer;
  auto sent = [&] { return log.Seen(); };
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(step);
    log.Clear();
    r.BeginStep();
    r.Ready(6, nullptr, 3);
    EXPECT_EQ(sent(), (std::vector<int64_t>{6}));
    r.Ready(0, nullptr, 1);  // half of bucket 0: not yet
    EXPECT_EQ(sent(), (std::vector<int64_t>{6}));
    r.Ready(1, nullptr, 1);
    EXPECT_EQ(sent(), (std::vector<int64_t>{6, 0}));
    r.Ready(2, nullptr, 2);
    EXPECT_EQ(sent(), (std::vector<int64_t>{6, 0, 2}));
    ASSERT_TRUE(r.FinishStep(milliseconds(5000)).ok());
    // Bucket [4, 6) got no gradient: a zero one, from FinishStep().
    EXPECT_EQ(sent(), (std::vector<int64_t>{6, 0, 2, 4}));
    std::lock_guard<std::mutex> lock(log.mu);
    for (const std::thread::id& id : log.by)
      EXPECT_EQ(id, std::this_thread::get_id());
  }
  fail_first = true;
  log.Clear();
  r.BeginStep();
  r.Ready(0, nullptr, 2);
  r.Ready(2, nullptr, 2);  // after the failure: not sent
  Status st = r.FinishStep(milliseconds(5000));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("server lost"), std::string::npos);
  EXPECT_NE(st.message().find("bucket 0 of 4"), std::string::npos)
      << st.message();
  EXPECT_EQ(sent(), (std::vector<int64_t>{0}));

  // A gradient for a bucket already sent (a parameter used twice in the
  // graph): with send-on-fill the bucket went the moment it filled, so the
  // late part is always an error, named, and the bucket is not sent again.
  // (A fresh reducer: a failed step's error stays.)
  log.Clear();
  std::unique_ptr<BucketReducer> fresh =
      RecordingReducer(grads, log, /*fill_order=*/true, /*send_on_fill=*/true);
  BucketReducer& twice = *fresh;
  twice.BeginStep();
  twice.Ready(6, nullptr, 3);
  twice.Ready(7, nullptr, 1);
  twice.Ready(0, nullptr, 2);  // after the error: not sent
  st = twice.FinishStep(milliseconds(5000));
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("[7, 8) arrived after its bucket 3 was sent"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(sent(), (std::vector<int64_t>{6}));
}

TEST(BucketReducerTest, AFailureOnTheCallersThreadIsReturnedNamingTheBucket) {
  std::vector<float> grads(4, 1.0f);
  BucketReducer r(
      {0, 2, 4},
      [&](float* data, size_t) {
        return data == grads.data() ? Status::Unavailable("server lost")
                                    : Status::Ok();
      },
      grads.data(), std::make_shared<int>(0));
  r.set_caller_finishes(true);
  r.BeginStep();
  Status st = r.FinishStep(milliseconds(5000));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("server lost"), std::string::npos);
  EXPECT_NE(st.message().find("bucket 0 of 2"), std::string::npos);
  EXPECT_TRUE(r.idle());
}

}  // namespace
}  // namespace strata
