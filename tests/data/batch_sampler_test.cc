#include "data/batch_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace strata {
namespace {

std::vector<int64_t> Range(int64_t from, int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Labels with class proportions 50%, 30%, 15%, 5% over `n` examples.
std::vector<int64_t> ProportionalLabels(int64_t n) {
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = (i * 7919) % 100;
    labels[i] = r < 50 ? 0 : r < 80 ? 1 : r < 95 ? 2 : 3;
  }
  return labels;
}

std::vector<std::vector<int64_t>> OneEpoch(BatchSampler& s, int64_t batch) {
  std::vector<std::vector<int64_t>> batches;
  const int64_t epoch = s.epoch();
  std::vector<int64_t> b;
  do {
    EXPECT_EQ(s.Next(batch, &b), epoch);
    batches.push_back(b);
  } while (!s.epoch_finished());
  EXPECT_EQ(s.epoch(), epoch + 1);
  EXPECT_EQ(static_cast<int64_t>(batches.size()), s.BatchesPerEpoch(batch));
  return batches;
}

void ExpectEachOnce(const std::vector<std::vector<int64_t>>& batches,
                    std::vector<int64_t> indices) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  std::sort(indices.begin(), indices.end());
  EXPECT_EQ(all, indices);
}

TEST(BatchSamplerTest, StratifiedBatchesMatchTheShardProportions) {
  // A shard of every third example of a 3000-example dataset.
  const std::vector<int64_t> labels = ProportionalLabels(3000);
  std::vector<int64_t> shard;
  for (int64_t i = 0; i < 3000; i += 3) shard.push_back(i);
  std::map<int64_t, int64_t> in_shard;
  for (int64_t i : shard) ++in_shard[labels[i]];
  auto s = MakeBatchSampler("stratified", shard, labels, {}, 7);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int64_t batch : {64, 20, 37}) {
    const auto batches = OneEpoch(**s, batch);
    ExpectEachOnce(batches, shard);
    std::map<int64_t, int64_t> running;
    int64_t seen = 0;
    for (size_t b = 0; b + 1 < batches.size(); ++b) {  // full batches
      ASSERT_EQ(static_cast<int64_t>(batches[b].size()), batch);
      std::map<int64_t, int64_t> count;
      for (int64_t i : batches[b]) ++count[labels[i]];
      seen += batch;
      for (const auto& [c, n] : in_shard) {
        const double quota = double(batch) * n / double(shard.size());
        // Largest remainder: floor or floor + 1 of the exact share...
        EXPECT_GE(count[c], std::floor(quota))
            << "batch " << b << " class " << c;
        EXPECT_LE(count[c], std::floor(quota) + 1)
            << "batch " << b << " class " << c;
        // ...and the running total stays within one of the exact share.
        running[c] += count[c];
        EXPECT_LT(std::fabs(running[c] - double(seen) * n / shard.size()), 1.0)
            << "after batch " << b << " class " << c;
      }
    }
  }
}

TEST(BatchSamplerTest, ClusterStratifiedDrawsFromEveryClassAndSubcluster) {
  // 10 classes x 2 sub-clusters, 50 examples each: a batch of 40 holds two
  // of every stratum.
  const int64_t n = 1000;
  std::vector<int64_t> labels(n);
  std::vector<int32_t> clusters(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = i % 10;
    clusters[i] = static_cast<int32_t>(labels[i] * 2 + (i / 10) % 2);
  }
  auto s =
      MakeBatchSampler("cluster-stratified", Range(0, n), labels, clusters, 3);
  ASSERT_TRUE(s.ok());
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto batches = OneEpoch(**s, 40);
    ExpectEachOnce(batches, Range(0, n));
    for (const auto& b : batches) {
      std::map<int32_t, int> per;
      for (int64_t i : b) ++per[clusters[i]];
      EXPECT_EQ(per.size(), 20u);
      for (const auto& [c, k] : per) EXPECT_EQ(k, 2) << "stratum " << c;
    }
  }
  // The plain stratified sampler over the same data ignores sub-clusters:
  // some batch then misses a sub-cluster.
  auto plain = MakeBatchSampler("stratified", Range(0, n), labels, clusters, 3);
  ASSERT_TRUE(plain.ok());
  bool missed = false;
  for (const auto& b : OneEpoch(**plain, 40)) {
    std::map<int32_t, int> per;
    for (int64_t i : b) ++per[clusters[i]];
    missed |= per.size() < 20;
  }
  EXPECT_TRUE(missed);
}

TEST(BatchSamplerTest, DeterministicPerSeedAndFreshEachEpoch) {
  const std::vector<int64_t> labels = ProportionalLabels(500);
  auto a = MakeBatchSampler("stratified", Range(0, 500), labels, {}, 11);
  auto b = MakeBatchSampler("stratified", Range(0, 500), labels, {}, 11);
  auto c = MakeBatchSampler("stratified", Range(0, 500), labels, {}, 12);
  const auto a0 = OneEpoch(**a, 32), a1 = OneEpoch(**a, 32);
  EXPECT_EQ(a0, OneEpoch(**b, 32));
  EXPECT_EQ(a1, OneEpoch(**b, 32));
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, OneEpoch(**c, 32));
  ExpectEachOnce(a1, Range(0, 500));
}

TEST(BatchSamplerTest, ShuffleIsTheEpochShuffler) {
  auto s = MakeBatchSampler("shuffle", Range(10, 50), std::vector<int64_t>(60),
                            {}, 5);
  ASSERT_TRUE(s.ok());
  EpochShuffler ref(Range(10, 50), 5);
  std::vector<int64_t> x, y;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ((*s)->Next(8, &x), ref.Next(8, &y));
    EXPECT_EQ(x, y);
    EXPECT_EQ((*s)->epoch_finished(), ref.epoch_finished());
  }
  auto fixed = MakeBatchSampler("shuffle", Range(0, 5), std::vector<int64_t>(5),
                                {}, 5, /*shuffle=*/false);
  ASSERT_TRUE(fixed.ok());
  (*fixed)->Next(5, &x);
  EXPECT_EQ(x, Range(0, 5));
}

TEST(BatchSamplerTest, EpochBookkeepingAndEdgeCases) {
  auto s = MakeBatchSampler("stratified", Range(0, 7),
                            std::vector<int64_t>{0, 1, 0, 1, 0, 1, 2}, {}, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->size(), 7);
  EXPECT_EQ((*s)->epoch(), 0);
  EXPECT_FALSE((*s)->epoch_finished());
  std::vector<int64_t> b;
  EXPECT_EQ((*s)->Next(3, &b), 0);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_FALSE((*s)->epoch_finished());
  (*s)->Next(3, &b);
  EXPECT_EQ((*s)->Next(3, &b), 0);
  EXPECT_EQ(b.size(), 1u);  // short last batch, no straddling
  EXPECT_TRUE((*s)->epoch_finished());
  EXPECT_EQ((*s)->epoch(), 1);
  // A batch larger than the shard is the whole shard.
  EXPECT_EQ((*s)->Next(100, &b), 1);
  EXPECT_EQ(b.size(), 7u);

  auto empty = MakeBatchSampler("stratified", {}, {}, {}, 1);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->Next(4, &b), 0);
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE((*empty)->epoch_finished());

  EXPECT_FALSE(
      MakeBatchSampler("balanced", Range(0, 3), std::vector<int64_t>(3), {}, 1)
          .ok());
  EXPECT_FALSE(MakeBatchSampler("stratified", Range(0, 4),
                                std::vector<int64_t>(3), {}, 1)
                   .ok());
}

}  // namespace
}  // namespace strata
