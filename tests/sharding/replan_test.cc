// The rest of an epoch re-planned over another number of workers: every
// remaining example goes to exactly one worker, the parts are balanced,
// and a stratified split keeps each part's classes in the remainder's
// proportions.
#include "sharding/replan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "sharding/shard_test_util.h"

namespace strata {
namespace {

using testing::SkewedLabels;

ShardPlan PlanOf(ShardMethod method) {
  ShardPlan plan;
  plan.options.method = method;
  plan.options.seed = 7;
  return plan;
}

// A random half of the dataset's ids (what old workers left in an epoch).
std::vector<int64_t> RandomHalf(int64_t n, uint64_t seed) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  ids.resize(n / 2);
  return ids;
}

TEST(SplitRemainderTest, EveryRemainingExampleGoesToOneWorkerInBalance) {
  const Dataset d = SkewedLabels(1000, 6, 3);
  const std::vector<int64_t> left = RandomHalf(d.size(), 11);
  for (ShardMethod method :
       {ShardMethod::kMod, ShardMethod::kRandom, ShardMethod::kStratified}) {
    for (int workers : {1, 2, 3, 7}) {
      const auto parts = SplitRemainder(PlanOf(method), left, d.labels,
                                        d.num_classes, workers, 5);
      ASSERT_EQ(static_cast<int>(parts.size()), workers);
      std::map<int64_t, int> seen;
      size_t smallest = left.size(), largest = 0;
      for (const auto& part : parts) {
        EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
        for (int64_t i : part) ++seen[i];
        smallest = std::min(smallest, part.size());
        largest = std::max(largest, part.size());
      }
      EXPECT_EQ(seen.size(), left.size()) << ShardMethodName(method);
      for (int64_t i : left) EXPECT_EQ(seen[i], 1) << i;
      EXPECT_LE(largest - smallest, 1u)
          << ShardMethodName(method) << " over " << workers;
    }
  }
}

TEST(SplitRemainderTest, AStratifiedSplitKeepsEveryClassWithinOneAcrossParts) {
  const Dataset d = SkewedLabels(3000, 8, 4);
  const std::vector<int64_t> left = RandomHalf(d.size(), 12);
  const auto parts = SplitRemainder(PlanOf(ShardMethod::kStratified), left,
                                    d.labels, d.num_classes, 3, 1);
  for (int64_t c = 0; c < d.num_classes; ++c) {
    std::vector<int64_t> counts;
    for (const auto& part : parts) {
      counts.push_back(std::count_if(part.begin(), part.end(), [&](int64_t i) {
        return d.labels[i] == c;
      }));
    }
    EXPECT_LE(*std::max_element(counts.begin(), counts.end()) -
                  *std::min_element(counts.begin(), counts.end()),
              1)
        << "class " << c;
  }
  // The parts are as close to the dataset's class distribution as the
  // remainder is; a mod split of the same remainder is no closer.
  double stratified = 0, by_mod = 0;
  for (const auto& part : parts)
    stratified = std::max(stratified, ClassTv(part, d.labels, d.num_classes));
  for (const auto& part : SplitRemainder(PlanOf(ShardMethod::kMod), left,
                                         d.labels, d.num_classes, 3, 1))
    by_mod = std::max(by_mod, ClassTv(part, d.labels, d.num_classes));
  EXPECT_LE(stratified, ClassTv(left, d.labels, d.num_classes) + 0.01);
  EXPECT_LE(stratified, by_mod + 1e-12);
}

TEST(SplitRemainderTest, ClassTvIsHalfTheL1Distance) {
  // Dataset: classes 0,0,1,1 (1/2, 1/2); part {0, 1, 2}: (2/3, 1/3).
  const std::vector<int64_t> labels = {0, 0, 1, 1};
  EXPECT_NEAR(ClassTv({0, 1, 2}, labels, 2), 1.0 / 6, 1e-12);
  EXPECT_EQ(ClassTv({}, labels, 2), 0);
  EXPECT_NEAR(ClassTv({0, 2}, labels, 2), 0, 1e-12);
}

}  // namespace
}  // namespace strata
