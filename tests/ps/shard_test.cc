#include "ps/shard.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata {
namespace {

TEST(KeyLayoutTest, BalancedSplitsLargeRangesAndCoversEverything) {
  auto l = KeyLayout::Balanced(10, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->range(0), (KeyRange{0, 4}));
  EXPECT_EQ(l->range(1), (KeyRange{4, 7}));
  EXPECT_EQ(l->range(2), (KeyRange{7, 10}));
  EXPECT_EQ(l->RangeOf(0), 0);
  EXPECT_EQ(l->RangeOf(3), 0);
  EXPECT_EQ(l->RangeOf(4), 1);
  EXPECT_EQ(l->RangeOf(9), 2);
  auto big = KeyLayout::Balanced(1000003, 4);
  ASSERT_TRUE(big.ok());
  int64_t covered = 0;
  for (const auto& r : big->ranges()) {
    EXPECT_EQ(r.begin, covered);
    EXPECT_LE(r.size(), 1000003 / 4 + 1);
    EXPECT_GE(r.size(), 1000003 / 4);
    covered = r.end;
  }
  EXPECT_EQ(covered, 1000003);
  EXPECT_FALSE(KeyLayout::Balanced(2, 3).ok());
  EXPECT_FALSE(KeyLayout::Balanced(5, 0).ok());
}

TEST(KeyLayoutTest, BucketedCutsEachServersShareIntoEqualRanges) {
  // Shares [0, 4), [4, 7), [7, 10); ranges of at most 2 keys.
  auto l = KeyLayout::Bucketed(10, 3, 2);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->num_servers(), 3);
  ASSERT_EQ(l->num_ranges(), 6);
  const std::vector<KeyRange> want = {{0, 2}, {2, 4}, {4, 6},
                                      {6, 7}, {7, 9}, {9, 10}};
  const std::vector<int> owners = {0, 0, 1, 1, 2, 2};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(l->range(i), want[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(l->owner(i), owners[static_cast<size_t>(i)]) << i;
  }
  EXPECT_EQ(l->ShareOf(1), (KeyRange{4, 7}));
  EXPECT_EQ(l->RangesOf(2), (std::vector<KeyRange>{{7, 9}, {9, 10}}));
  EXPECT_EQ(l->RangeOf(6), 3);
  EXPECT_EQ(l->ToString(),
            "server 0: [0, 4) in 2 ranges, server 1: [4, 7) in 2 ranges, "
            "server 2: [7, 10) in 2 ranges");
  // A range never straddles two servers, and sizes differ by at most one
  // within a share.
  auto big = KeyLayout::Bucketed(1000003, 2, 100000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->num_ranges(), 12);  // 500002 and 500001 keys: 6 ranges each
  int64_t covered = 0;
  for (int i = 0; i < big->num_ranges(); ++i) {
    EXPECT_EQ(big->range(i).begin, covered);
    EXPECT_LE(big->range(i).size(), 100000);
    EXPECT_GE(big->range(i).size(), 83333);
    covered = big->range(i).end;
  }
  EXPECT_EQ(covered, 1000003);
  EXPECT_EQ(big->ShareOf(0).end, 500002);
  // No bucket size: one range per server, as Balanced.
  auto plain = KeyLayout::Bucketed(10, 3, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ranges(), KeyLayout::Balanced(10, 3)->ranges());
  EXPECT_FALSE(KeyLayout::Bucketed(2, 3, 1).ok());
}

TEST(KeyLayoutTest, AlignedCutsAtTensorEndsAndKeepsLargeTensorsWhole) {
  // Tensors of 3, 2, 10, 1, 1, 3 keys (ends 3, 5, 15, 16, 17, 20); one
  // server; ranges of at most 5 keys: [0, 5) holds two tensors, the
  // 10-key tensor is a range of its own, the last three fit in one.
  const std::vector<int64_t> ends = {3, 5, 15, 16, 17, 20};
  auto one = KeyLayout::Aligned(20, 1, 5, ends);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->ranges(), (std::vector<KeyRange>{{0, 5}, {5, 15}, {15, 20}}));
  // Two servers (shares [0, 10) and [10, 20)): the share boundary cuts the
  // large tensor, and each share is cut on its own.
  auto two = KeyLayout::Aligned(20, 2, 5, ends);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->ranges(),
            (std::vector<KeyRange>{{0, 5}, {5, 10}, {10, 15}, {15, 20}}));
  EXPECT_EQ(two->owner(1), 0);
  EXPECT_EQ(two->owner(2), 1);
  // A cap below every tensor: one range per tensor piece.
  auto fine = KeyLayout::Aligned(20, 1, 1, ends);
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->num_ranges(), 6);
  // No tensors: Bucketed; no cap: Balanced.
  EXPECT_EQ(KeyLayout::Aligned(20, 1, 5, {})->num_ranges(), 4);
  EXPECT_EQ(KeyLayout::Aligned(20, 2, 0, ends)->num_ranges(), 2);
  EXPECT_FALSE(KeyLayout::Aligned(20, 1, 5, {3, 3, 20}).ok());
  auto short_ends = KeyLayout::Aligned(20, 1, 5, {3, 19});
  ASSERT_FALSE(short_ends.ok());
  EXPECT_NE(short_ends.status().message().find("end at 19"), std::string::npos)
      << short_ends.status().message();
}

TEST(KeyLayoutTest,
     AlignedKeepsOneRangePerServerWhenTheFirstTensorIsNearlyAll) {
  // The first tensor (filled last by the backward pass) is 19 of 20 keys:
  // the one key that could travel early is not worth a message of its own.
  auto one = KeyLayout::Aligned(20, 1, 5, {19, 20});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->ranges(), (std::vector<KeyRange>{{0, 20}}));
  // Two servers: each share is one range (Balanced), although server 1's
  // share ends with a tensor of its own.
  auto two = KeyLayout::Aligned(20, 2, 5, {19, 20});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->ranges(), KeyLayout::Balanced(20, 2)->ranges());
  // At 17 of 20 (3 keys, more than a tenth, can go early) the cut stays.
  auto cut = KeyLayout::Aligned(20, 1, 5, {17, 20});
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->ranges(), (std::vector<KeyRange>{{0, 17}, {17, 20}}));
  // The boundary: 18 of 20 is nearly all (2 keys, a tenth, go early).
  EXPECT_EQ(KeyLayout::Aligned(20, 1, 5, {18, 20})->num_ranges(), 1);
}

LrSchedule Constant(double lr) {
  LrSchedule s;
  s.lr = lr;
  return s;
}

using State = ParameterShard::PushOutcome::State;

TEST(ParameterShardTest, AsyncAppliesEachGradientWithScaledRate) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kAsync;
  p.num_workers = 4;
  p.rate_scale = 0.25;
  ParameterShard shard({0, 2}, {1.0f, 2.0f}, OptimizerOptions{}, Constant(0.4),
                       p);
  float g[2] = {1.0f, -2.0f};
  auto o = shard.Push(g, 0);
  EXPECT_EQ(o.state, State::kApplied);
  EXPECT_EQ(o.version, 1);
  float out[2];
  EXPECT_EQ(shard.ReadIfAtLeast(1, out), 1);
  EXPECT_FLOAT_EQ(out[0], 1.0f - 0.1f * 1.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f + 0.1f * 2.0f);
  // A gradient computed on version 0 arriving at version 1 has staleness 1.
  o = shard.Push(g, 0);
  EXPECT_EQ(o.staleness, 1);
  EXPECT_EQ(shard.stats().staleness.at(0), 1);
  EXPECT_EQ(shard.stats().staleness.at(1), 1);
  EXPECT_EQ(shard.ReadIfAtLeast(3, out), -1);
}

TEST(ParameterShardTest, SyncAppliesTheMeanOfNGradientsOnce) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 3;
  p.updates_per_step = 3;
  ParameterShard shard({0, 1}, {0.0f}, OptimizerOptions{}, Constant(1.0), p);
  float a = 1, b = 2, c = 6;
  EXPECT_EQ(shard.Push(&a, 0).state, State::kPending);
  EXPECT_EQ(shard.Push(&b, 0).state, State::kPending);
  float out;
  EXPECT_EQ(shard.ReadIfAtLeast(1, &out), -1);  // the step is still open
  auto o = shard.Push(&c, 0);
  EXPECT_EQ(o.state, State::kApplied);
  EXPECT_EQ(o.version, 1);
  EXPECT_EQ(shard.ReadIfAtLeast(1, &out), 1);
  EXPECT_FLOAT_EQ(out, -3.0f);  // 0 - 1.0 * mean(1, 2, 6)
  EXPECT_EQ(shard.stats().applied_gradients, 3);
  EXPECT_EQ(shard.stats().updates, 1);
}

TEST(ParameterShardTest, KOfNDropsLateGradients) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 3;
  p.updates_per_step = 2;
  ParameterShard shard({0, 1}, {0.0f}, OptimizerOptions{}, Constant(1.0), p);
  float a = 2, b = 4, late = 100;
  shard.Push(&a, 0);
  EXPECT_EQ(shard.Push(&b, 0).state, State::kApplied);
  auto o = shard.Push(&late, 0);
  EXPECT_EQ(o.state, State::kDropped);
  EXPECT_EQ(o.staleness, 1);
  float out;
  shard.ReadIfAtLeast(0, &out);
  EXPECT_FLOAT_EQ(out, -3.0f);  // the late gradient changed nothing
  EXPECT_EQ(shard.stats().dropped, 1);
  EXPECT_EQ(shard.stats().applied_gradients, 2);
}

TEST(ParameterShardTest, KOfNDefersLateGradientsIntoTheNextStep) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 3;
  p.updates_per_step = 2;
  p.defer_late = true;
  ParameterShard shard({0, 1}, {0.0f}, OptimizerOptions{}, Constant(1.0), p);
  float a = 2, b = 4, late = 10, fresh = 20;
  shard.Push(&a, 0);
  shard.Push(&b, 0);  // version 1, param -3
  EXPECT_EQ(shard.Push(&late, 0).state, State::kPending);  // carried over
  auto o = shard.Push(&fresh, 1);
  EXPECT_EQ(o.state, State::kApplied);
  EXPECT_EQ(o.version, 2);
  float out;
  shard.ReadIfAtLeast(0, &out);
  EXPECT_FLOAT_EQ(out, -3.0f - 15.0f);  // exactly k = 2 gradients: mean(10, 20)
  EXPECT_EQ(shard.stats().deferred, 1);
  EXPECT_EQ(shard.stats().dropped, 0);
  EXPECT_EQ(shard.stats().applied_gradients, 4);
}

TEST(ParameterShardTest, InverseStalenessDividesTheRate) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kAsync;
  p.inverse_staleness = true;
  ParameterShard shard({0, 1}, {0.0f}, OptimizerOptions{}, Constant(1.0), p);
  float g = 1;
  shard.Push(&g, 0);  // staleness 0: full rate -> -1
  shard.Push(&g, 0);  // staleness 1: full rate -> -2
  shard.Push(&g, 0);  // staleness 2: half rate -> -2.5
  shard.Push(&g, 0);  // staleness 3: a third -> -2.8333
  float out;
  shard.ReadIfAtLeast(0, &out);
  EXPECT_NEAR(out, -2.0f - 0.5f - 1.0f / 3.0f, 1e-6);
}

TEST(ParameterShardTest, OverwriteChecksTheSize) {
  UpdatePolicy p;
  ParameterShard shard({5, 7}, {0.0f, 0.0f}, OptimizerOptions{}, Constant(1.0),
                       p);
  float v[2] = {3, 4};
  EXPECT_TRUE(shard.Overwrite(v, 2).ok());
  EXPECT_FALSE(shard.Overwrite(v, 3).ok());
  float out[2];
  EXPECT_EQ(shard.ReadIfAtLeast(0, out), 0);
  EXPECT_FLOAT_EQ(out[1], 4.0f);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(ParameterShardTest, ElasticRuleMovesTheCentreByTheSumOfDifferences) {
  // EASGD: the centre moves by exactly the sum of the elastic differences
  // it received, whatever the learning rate and momentum say.
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kAsync;
  p.rule = UpdatePolicy::Rule::kElastic;
  p.num_workers = 3;
  p.rate_scale = 0.25;
  OptimizerOptions momentum;
  momentum.momentum = 0.9;
  ParameterShard shard({0, 3}, {1.0f, 2.0f, -3.0f}, momentum, Constant(0.4), p);
  const float d[3][3] = {
      {0.5f, -0.25f, 1.0f}, {0.125f, 0.0f, -2.0f}, {-1.0f, 0.75f, 0.5f}};
  for (const auto& diff : d) shard.Push(diff, 0);
  float out[3];
  ASSERT_EQ(shard.ReadIfAtLeast(3, out), 3);
  EXPECT_FLOAT_EQ(out[0], 1.0f + 0.5f + 0.125f - 1.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f - 0.25f + 0.0f + 0.75f);
  EXPECT_FLOAT_EQ(out[2], -3.0f + 1.0f - 2.0f + 0.5f);
  // Control: the gradient rule with the same pushes lands elsewhere.
  p.rule = UpdatePolicy::Rule::kGradientStep;
  ParameterShard steps({0, 3}, {1.0f, 2.0f, -3.0f}, momentum, Constant(0.4), p);
  for (const auto& diff : d) steps.Push(diff, 0);
  float other[3];
  ASSERT_EQ(steps.ReadIfAtLeast(3, other), 3);
  EXPECT_GT(std::fabs(other[0] - out[0]), 0.1f);
}

TEST(ParameterShardTest, SyncSumsInsteadOfAveragingWhenAsked) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 2;
  p.updates_per_step = 2;
  p.sum_gradients = true;
  ParameterShard shard({0, 1}, {1.0f}, OptimizerOptions{}, Constant(0.1), p);
  const float a = 1.0f, b = 3.0f;
  shard.Push(&a, 0);
  shard.Push(&b, 0);
  float out;
  ASSERT_EQ(shard.ReadIfAtLeast(1, &out), 1);
  EXPECT_FLOAT_EQ(out, 1.0f - 0.1f * 4.0f);  // the mean would give 1 - 0.2
}

// A step's sum starts from nothing whatever came before: steps of two
// gradients, then (a worker gone) steps of one, which are applied straight
// from the message, and a push covering part of the range, which is summed
// into zeros.
TEST(ParameterShardTest, SyncStepsStartFromAnEmptySumWhateverTheStepSize) {
  UpdatePolicy p;
  p.mode = UpdatePolicy::Mode::kSync;
  p.num_workers = 2;
  p.updates_per_step = 2;
  ParameterShard shard({0, 2}, {0.0f, 0.0f}, OptimizerOptions{}, Constant(1.0),
                       p);
  const float a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {10, 20}, d[2] = {30, 40};
  EXPECT_EQ(shard.Push(a, 0).state, State::kPending);
  EXPECT_EQ(shard.Push(b, 0).state, State::kApplied);  // mean {2, 3}
  EXPECT_EQ(shard.Push(c, 1).state, State::kPending);
  EXPECT_EQ(shard.Push(d, 1).state, State::kApplied);  // mean {20, 30}
  float out[2];
  ASSERT_EQ(shard.ReadIfAtLeast(2, out), 2);
  EXPECT_FLOAT_EQ(out[0], -22.0f);
  EXPECT_FLOAT_EQ(out[1], -33.0f);
  EXPECT_FALSE(shard.WorkerLeft());  // nothing pending: no step to close
  const float e[2] = {5, 6};
  auto o = shard.Push(e, 2);
  EXPECT_EQ(o.state, State::kApplied);
  EXPECT_EQ(o.version, 3);
  EXPECT_EQ(o.step_size, 1);
  ASSERT_EQ(shard.ReadIfAtLeast(3, out), 3);
  EXPECT_FLOAT_EQ(out[0], -27.0f);
  EXPECT_FLOAT_EQ(out[1], -39.0f);
  const float f = 7;
  const FloatPiece part{1, &f, 1};
  EXPECT_EQ(shard.Push(&part, 1, 3).state, State::kApplied);
  ASSERT_EQ(shard.ReadIfAtLeast(4, out), 4);
  EXPECT_FLOAT_EQ(out[0], -27.0f);  // not in the push: a zero gradient
  EXPECT_FLOAT_EQ(out[1], -46.0f);
  const ShardStats st = shard.stats();
  EXPECT_EQ(st.applied_gradients, 6);
  EXPECT_EQ(st.updates, 4);
  EXPECT_EQ(st.gradients_per_update.at(2), 2);
  EXPECT_EQ(st.tail_updates, 2);
}

}  // namespace
}  // namespace strata
