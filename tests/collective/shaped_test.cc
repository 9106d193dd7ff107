#include "collective/shaped.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "collective/inproc.h"

namespace strata {
namespace {

TEST(ShapedCollectiveTest, TheRingModelTakesTheSlowestLinkPerStep) {
  // 8 Mbit/s (a byte per microsecond) and 1 ms, one link at 4 Mbit/s.
  std::vector<LinkSpec> ring(4, LinkSpec{8e6, 1000000, 0});
  EXPECT_EQ(RingStepsNs(ring, 936, 1), 2000000);  // 936 + 64 header bytes
  EXPECT_EQ(RingStepsNs(ring, 936, 6), 12000000);
  ring[2].bits_per_second = 4e6;
  EXPECT_EQ(RingStepsNs(ring, 936, 6), 6 * 3000000);
  EXPECT_EQ(RingStepsNs(ring, 936, 0), 0);
  EXPECT_EQ(RingStepsNs({}, 936, 3), 0);
}

TEST(ShapedCollectiveTest, CallsTakeTheModelsTimeAndKeepTheirResults) {
  CollectiveHub hub;
  const int n = 2;
  std::vector<float> out[n];
  std::vector<double> took(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CollectiveOptions o;
      o.rank = r;
      o.size = n;
      o.prefix = "shaped";
      auto joined = hub.Join(o);
      ASSERT_TRUE(joined.ok()) << joined.status().ToString();
      // 30 ms a step: an all-reduce over 2 is 2 steps.
      auto c = NewShapedCollective(std::move(*joined),
                                   std::vector<LinkSpec>(n, {0, 30000000, 0}));
      std::vector<float> v(8, float(r + 1));
      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_TRUE(c->AllReduceSum(v.data(), v.size()).ok());
      took[r] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      out[r] = v;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r], std::vector<float>(8, 3.0f));
    EXPECT_GE(took[r], 0.060);  // never shorter than the model
  }
}

}  // namespace
}  // namespace strata
