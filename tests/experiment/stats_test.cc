#include "experiment/stats.h"

#include <gtest/gtest.h>

#include <cmath>

namespace strata {
namespace {

TEST(StatsTest, MeanAndUnbiasedVarianceByHand) {
  // mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32; 32 / (8 - 1).
  const std::vector<double> xs = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(Mean(xs), 5.0);
  EXPECT_DOUBLE_EQ(UnbiasedVariance(xs), 32.0 / 7.0);
  // Two values: (a - b)^2 / 2.
  EXPECT_NEAR(UnbiasedVariance({0.935, 0.941}), 0.006 * 0.006 / 2, 1e-15);
  // 1, 2, 3, 4: mean 2.5, deviations 2.25+0.25+0.25+2.25 = 5, / 3.
  EXPECT_NEAR(UnbiasedVariance({1, 2, 3, 4}), 5.0 / 3.0, 1e-15);
}

TEST(StatsTest, VarianceIsNotTheBiasedOne) {
  // The population variance of {1, 3} is 1; the unbiased one is 2.
  EXPECT_DOUBLE_EQ(UnbiasedVariance({1, 3}), 2.0);
}

TEST(StatsTest, LargeOffsetsKeepPrecision) {
  // A naive sum-of-squares formula loses everything here.
  const std::vector<double> xs = {1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16};
  EXPECT_NEAR(UnbiasedVariance(xs), 30.0, 1e-6);
}

TEST(StatsTest, UndefinedValuesAreNaN) {
  EXPECT_TRUE(std::isnan(Mean({})));
  EXPECT_TRUE(std::isnan(UnbiasedVariance({})));
  EXPECT_TRUE(std::isnan(UnbiasedVariance({3.0})));
  EXPECT_TRUE(std::isnan(VarianceRatio(1.0, 0.0)));
  EXPECT_TRUE(std::isnan(VarianceRatio(kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(VarianceRatio(1.0, kNaN)));
}

TEST(StatsTest, VarianceRatioMatchesPaper001) {
  // Table II (CIFAR-10): validation accuracy variance, random 0.000863 vs
  // stratified 0.000284; the text says "3.03X less variance".
  EXPECT_NEAR(VarianceRatio(0.000863, 0.000284), 3.0387, 1e-4);
  // Training accuracy, random 0.001086 vs distribution-aware 30: "8.48X".
  EXPECT_NEAR(VarianceRatio(0.001086, 0.000128), 8.484, 1e-3);
  EXPECT_DOUBLE_EQ(VarianceRatio(2.0, 4.0), 0.5);
}

TEST(StatsTest, DescribeCollectsEverything) {
  const SampleStats s = Describe({3, 1, 2});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.variance, 1.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
}

TEST(StatsTest, QuartilesInterpolateLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [25, 50, 75]) = 1.75, 2.5, 3.25.
  FiveNumbers f = Quartiles({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(f.min, 1);
  EXPECT_DOUBLE_EQ(f.q1, 1.75);
  EXPECT_DOUBLE_EQ(f.median, 2.5);
  EXPECT_DOUBLE_EQ(f.q3, 3.25);
  EXPECT_DOUBLE_EQ(f.max, 4);
  // Odd count: [10, 20, 30, 40, 50] -> 20, 30, 40.
  f = Quartiles({50, 10, 40, 20, 30});
  EXPECT_DOUBLE_EQ(f.q1, 20);
  EXPECT_DOUBLE_EQ(f.median, 30);
  EXPECT_DOUBLE_EQ(f.q3, 40);
  f = Quartiles({7});
  EXPECT_DOUBLE_EQ(f.q1, 7);
  EXPECT_DOUBLE_EQ(f.q3, 7);
  EXPECT_TRUE(std::isnan(Quartiles({}).median));
}

TEST(StatsTest, InterpolateIsPiecewiseLinearAndHoldsEnds) {
  const std::vector<double> xs = {0, 10, 20}, ys = {1, 3, 2};
  EXPECT_DOUBLE_EQ(Interpolate(xs, ys, 5), 2.0);
  EXPECT_DOUBLE_EQ(Interpolate(xs, ys, 15), 2.5);
  EXPECT_DOUBLE_EQ(Interpolate(xs, ys, 10), 3.0);
  EXPECT_DOUBLE_EQ(Interpolate(xs, ys, -4), 1.0);
  EXPECT_DOUBLE_EQ(Interpolate(xs, ys, 99), 2.0);
  EXPECT_TRUE(std::isnan(Interpolate({}, {}, 1)));
}

}  // namespace
}  // namespace strata
