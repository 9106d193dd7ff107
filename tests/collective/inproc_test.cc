// Collectives through memory between threads (collective/inproc.h).
#include "collective/inproc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace strata {
namespace {

CollectiveOptions Member(int rank, int size, int timeout_ms = 10000) {
  CollectiveOptions o;
  o.rank = rank;
  o.size = size;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.prefix = "test";
  return o;
}

// Runs fn(rank, collective) on `size` threads of one hub.
std::vector<Status> OnThreads(
    int size, const std::function<Status(int, Collective&)>& fn) {
  CollectiveHub hub;
  std::vector<Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto c = hub.Join(Member(r, size));
      results[static_cast<size_t>(r)] = c.ok() ? fn(r, **c) : c.status();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(InprocCollectiveTest, AllReduceIsTheSumInRankOrderEverywhere) {
  constexpr int kSize = 4;
  constexpr size_t kCount = 1001;  // not a multiple of the members
  std::vector<std::vector<float>> data(kSize, std::vector<float>(kCount));
  for (int r = 0; r < kSize; ++r)
    for (size_t i = 0; i < kCount; ++i)
      data[r][i] = 0.1f * static_cast<float>(r + 1) + 1e-3f * i;
  std::vector<float> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    float acc = data[0][i];
    for (int r = 1; r < kSize; ++r) acc += data[r][i];
    expected[i] = acc;
  }
  auto results = OnThreads(kSize, [&](int r, Collective& c) {
    EXPECT_STREQ(c.backend(), "memory");
    for (int round = 0; round < 3; ++round) {
      std::vector<float> mine = data[r];
      RETURN_IF_ERROR(c.AllReduceSum(mine.data(), kCount));
      EXPECT_EQ(mine, expected) << "rank " << r << " round " << round;
    }
    return Status::Ok();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

// The mean is the rank-order sum times 1 / size in float, exactly as a sum
// followed by a scaling pass gives it, over slices longer than the
// reduction's block (5003 floats over 4 members: slices of 1251).
TEST(InprocCollectiveTest, AllReduceMeanIsTheSumTimesTheInverseSizeExactly) {
  constexpr int kSize = 4;
  constexpr size_t kCount = 5003;
  auto input = [](int r, size_t i) {
    return 0.3f * static_cast<float>(r + 1) + 1.7e-3f * static_cast<float>(i);
  };
  std::vector<float> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    float acc = input(0, i);
    for (int r = 1; r < kSize; ++r) acc += input(r, i);
    expected[i] = acc * (1.0f / kSize);
  }
  auto results = OnThreads(kSize, [&](int r, Collective& c) {
    for (int round = 0; round < 3; ++round) {
      std::vector<float> mine(kCount), summed(kCount);
      for (size_t i = 0; i < kCount; ++i) mine[i] = summed[i] = input(r, i);
      RETURN_IF_ERROR(c.AllReduceMean(mine.data(), kCount));
      EXPECT_EQ(mine, expected) << "rank " << r << " round " << round;
      // The sum is untouched by the mean's scaling.
      RETURN_IF_ERROR(c.AllReduceSum(summed.data(), kCount));
      for (size_t i = 0; i < kCount; ++i)
        if (summed[i] * (1.0f / kSize) != expected[i]) {
          ADD_FAILURE() << "rank " << r << " sum at " << i;
          break;
        }
    }
    return Status::Ok();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

// A backend without its own mean (Gloo's) gets the sum and then a scaling
// pass: here a one-member stand-in whose "sum" doubles.
TEST(CollectiveTest, TheDefaultMeanScalesTheBackendsSum) {
  class Doubling final : public Collective {
   public:
    Doubling() : Collective(0, 4) {}
    const char* backend() const override { return "test"; }
    Status AllReduceSum(float* data, size_t count) override {
      for (size_t i = 0; i < count; ++i) data[i] *= 2.0f;
      return Status::Ok();
    }
    Status ReduceScatterSum(float*, const std::vector<int64_t>&) override {
      return Status::Ok();
    }
    Status AllGather(float*, const std::vector<int64_t>&) override {
      return Status::Ok();
    }
    Status Barrier() override { return Status::Ok(); }
  } c;
  std::vector<float> v = {1.0f, -3.0f, 0.5f};
  ASSERT_TRUE(c.AllReduceMean(v.data(), v.size()).ok());
  EXPECT_EQ(v, (std::vector<float>{0.5f, -1.5f, 0.25f}));
}

// A member rewrites its buffer (its next gradients) as soon as its
// all-reduce returns, while the others may still be finishing theirs: no
// member's result may depend on another's buffer after that one returned.
// Members return at different times (uneven work between the calls).
TEST(InprocCollectiveTest, AMemberMayRewriteItsBufferOnceItsAllReduceReturns) {
  constexpr int kSize = 4;
  constexpr size_t kCount = 4099;
  constexpr int kRounds = 300;
  // Member r's input in `round`, and the sum in rank order.
  auto input = [](int r, int round, size_t i) {
    return static_cast<float>(round % 7) + 0.25f * static_cast<float>(r) +
           1e-3f * static_cast<float>(i % 97);
  };
  auto results = OnThreads(kSize, [&](int r, Collective& c) {
    std::vector<float> mine(kCount);
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < kCount; ++i) mine[i] = input(r, round, i);
      RETURN_IF_ERROR(c.AllReduceSum(mine.data(), kCount));
      int wrong = 0;
      for (size_t i = 0; i < kCount; ++i) {
        float acc = input(0, round, i);
        for (int q = 1; q < kSize; ++q) acc += input(q, round, i);
        if (mine[i] != acc) ++wrong;
      }
      EXPECT_EQ(wrong, 0) << "rank " << r << " round " << round;
      // At once: garbage where the others might still look.
      std::fill(mine.begin(), mine.end(), -1e30f);
      if ((round + r) % 5 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return Status::Ok();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(InprocCollectiveTest, ReduceScatterThenAllGatherIsAnAllReduce) {
  constexpr int kSize = 3;
  const std::vector<int64_t> counts = BalancedCounts(10, kSize);
  auto results = OnThreads(kSize, [&](int r, Collective& c) {
    std::vector<float> v(10);
    for (int i = 0; i < 10; ++i) v[i] = static_cast<float>(r * 100 + i);
    RETURN_IF_ERROR(c.ReduceScatterSum(v.data(), counts));
    RETURN_IF_ERROR(c.AllGather(v.data(), counts));
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(v[i], static_cast<float>(300 + 3 * i)) << r << " " << i;
    return c.Barrier();
  });
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(InprocCollectiveTest, AMissingMemberIsATimeoutThatSaysWhere) {
  CollectiveHub hub;
  auto c = hub.Join(Member(0, 1));  // a group of one needs no one
  ASSERT_TRUE(c.ok());
  auto late = hub.Join(Member(0, 2, 100));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Status::Code::kInvalidArgument)
      << late.status().ToString();  // the group "test" has 1 member
  CollectiveOptions other = Member(0, 2, 100);
  other.prefix = "pair";
  auto alone = hub.Join(other);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(alone.status().message().find("1 of 2 members"), std::string::npos)
      << alone.status().ToString();
}

TEST(InprocCollectiveTest, AMemberThatLeavesFailsTheOthersAtOnce) {
  CollectiveHub hub;
  Status waiting;
  std::thread t([&] {
    auto c = hub.Join(Member(1, 2, 30000));
    if (!c.ok()) {
      waiting = c.status();
      return;
    }
    std::vector<float> v(4, 1.f);
    const auto start = std::chrono::steady_clock::now();
    waiting = (*c)->AllReduceSum(v.data(), v.size());
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(10));
  });
  {
    auto c = hub.Join(Member(0, 2, 30000));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
  }  // leaves without the all-reduce
  t.join();
  EXPECT_EQ(waiting.code(), Status::Code::kUnavailable) << waiting.ToString();
  EXPECT_NE(waiting.message().find("member 0 left"), std::string::npos)
      << waiting.ToString();
}

TEST(InprocCollectiveTest, BadRanksAreRefused) {
  CollectiveHub hub;
  EXPECT_EQ(hub.Join(Member(2, 2)).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(hub.Join(Member(-1, 2)).status().code(),
            Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace strata
