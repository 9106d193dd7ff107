#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace strata {
namespace {

std::vector<int64_t> Range(int64_t from, int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Draws one epoch's batches and checks the epoch bookkeeping on the way.
std::vector<std::vector<int64_t>> OneEpoch(EpochShuffler& s, int64_t batch) {
  std::vector<std::vector<int64_t>> batches;
  const int64_t epoch = s.epoch();
  std::vector<int64_t> b;
  do {
    EXPECT_EQ(s.Next(batch, &b), epoch);
    batches.push_back(b);
  } while (!s.epoch_finished());
  EXPECT_EQ(s.epoch(), epoch + 1);
  return batches;
}

TEST(SamplerTest, EveryIndexOncePerEpochAndNoStraddling) {
  const std::vector<int64_t> indices = Range(100, 10);
  EpochShuffler s(indices, 42);
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_FALSE(s.epoch_finished());
  EXPECT_EQ(s.size(), 10);
  EXPECT_EQ(s.BatchesPerEpoch(3), 4);
  for (int e = 0; e < 4; ++e) {
    auto batches = OneEpoch(s, 3);
    ASSERT_EQ(batches.size(), 4u);
    EXPECT_EQ(batches[0].size(), 3u);
    EXPECT_EQ(batches[2].size(), 3u);
    EXPECT_EQ(batches[3].size(), 1u);  // the short last batch
    std::vector<int64_t> all;
    for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, indices) << "epoch " << e;
  }
}

TEST(SamplerTest, EpochFinishedOnlyOnLastBatch) {
  EpochShuffler s(Range(0, 6), 1);
  std::vector<int64_t> b;
  EXPECT_EQ(s.Next(2, &b), 0);
  EXPECT_FALSE(s.epoch_finished());
  EXPECT_EQ(s.Next(2, &b), 0);
  EXPECT_FALSE(s.epoch_finished());
  EXPECT_EQ(s.Next(2, &b), 0);
  EXPECT_TRUE(s.epoch_finished());
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(s.Next(2, &b), 1);
  EXPECT_FALSE(s.epoch_finished());
}

TEST(SamplerTest, DeterministicAndReshuffledEachEpoch) {
  EpochShuffler a(Range(0, 50), 7), b(Range(0, 50), 7), c(Range(0, 50), 8);
  auto a0 = OneEpoch(a, 50), a1 = OneEpoch(a, 50);
  auto b0 = OneEpoch(b, 50), b1 = OneEpoch(b, 50);
  auto c0 = OneEpoch(c, 50);
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a0, a1);               // a new order each epoch
  EXPECT_NE(a0, c0);               // a new order for another seed
  EXPECT_NE(a0[0], Range(0, 50));  // actually shuffled
}

TEST(SamplerTest, EpochOrderDoesNotDependOnBatchSize) {
  EpochShuffler a(Range(0, 20), 3), b(Range(0, 20), 3);
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> flat_a, flat_b;
    for (const auto& x : OneEpoch(a, 7))
      flat_a.insert(flat_a.end(), x.begin(), x.end());
    for (const auto& x : OneEpoch(b, 20))
      flat_b.insert(flat_b.end(), x.begin(), x.end());
    EXPECT_EQ(flat_a, flat_b);
  }
}

TEST(SamplerTest, BatchLargerThanDataAndEmptyIndices) {
  EpochShuffler s(Range(0, 3), 5);
  std::vector<int64_t> b;
  EXPECT_EQ(s.Next(10, &b), 0);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_TRUE(s.epoch_finished());
  EXPECT_EQ(s.BatchesPerEpoch(10), 1);

  EpochShuffler empty({}, 5);
  b = {1, 2};
  EXPECT_EQ(empty.Next(4, &b), 0);
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(empty.epoch_finished());
  EXPECT_EQ(empty.epoch(), 1);
}

}  // namespace
}  // namespace strata
