#include "experiment/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

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

namespace strata {
namespace {

// Reference values from printed tables (Student's t, Fisher's F).
TEST(DistributionsTest, MatchPrintedTables) {
  EXPECT_NEAR(IncompleteBeta(1, 1, 0.3), 0.3, 1e-12);
  EXPECT_NEAR(IncompleteBeta(2, 3, 0.4), 0.5248, 1e-4);  // by hand
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.7062, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.975, 4), 2.7764, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.975, 9), 2.2622, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.975, 29), 2.0452, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.025, 9), -2.2622, 1e-3);
  EXPECT_NEAR(StudentTCdf(0, 5), 0.5, 1e-12);
  EXPECT_NEAR(FQuantile(0.975, 4, 4), 9.6045, 1e-3);
  EXPECT_NEAR(FQuantile(0.95, 9, 9), 3.1789, 1e-3);
  EXPECT_NEAR(FQuantile(0.975, 1, 10), 6.9367, 1e-3);
  EXPECT_TRUE(std::isnan(StudentTQuantile(1.5, 3)));
  EXPECT_TRUE(std::isnan(FCdf(1, 0, 3)));
}

TEST(SignificanceTest, ConfidenceIntervalAndVarianceTests) {
  // 1..5: mean 3, sd sqrt(2.5), t(0.975, 4) = 2.7764.
  EXPECT_NEAR(MeanCi95({1, 2, 3, 4, 5}), 2.7764 * std::sqrt(2.5 / 5), 1e-3);
  EXPECT_TRUE(std::isnan(MeanCi95({1})));
  const std::vector<double> narrow = {0.50, 0.51, 0.49, 0.50, 0.52, 0.48};
  const std::vector<double> wide = {0.40, 0.62, 0.35, 0.58, 0.66, 0.31};
  // Variances 0.0002 and about 0.0228 (ratio about 114): both reject.
  EXPECT_LT(FTestP(wide, narrow), 0.001);
  EXPECT_LT(BrownForsytheP(wide, narrow), 0.01);
  // The F-test is symmetric in its two-sided form.
  EXPECT_NEAR(FTestP(wide, narrow), FTestP(narrow, wide), 1e-12);
  // The same spread shifted: nothing to reject.
  std::vector<double> shifted = narrow;
  for (double& x : shifted) x += 0.3;
  EXPECT_NEAR(FTestP(shifted, narrow), 1.0, 1e-9);
  EXPECT_GT(BrownForsytheP(shifted, narrow), 0.99);
  EXPECT_TRUE(std::isnan(FTestP({1, 1, 1}, narrow)));
}

// Two repeats a cell: each group's two deviations from its median are
// equal, so Brown-Forsythe has no spread within the groups to compare with.
// Rounding left 6e-33 there, and the report printed p = 0.0000 (a
// dogfood finding); it is NaN ("n/a"), as with 1 value.
TEST(SignificanceTest, BrownForsytheNeedsThreeValuesAGroup) {
  EXPECT_TRUE(std::isnan(BrownForsytheP({0.91, 0.93}, {0.95, 0.8})));
  EXPECT_TRUE(std::isnan(BrownForsytheP({0.5, 0.5, 0.5}, {0.7, 0.7, 0.7})));
  EXPECT_FALSE(
      std::isnan(BrownForsytheP({0.91, 0.93, 0.92}, {0.95, 0.8, 0.7})));
}

// The power calculation against a simulation of the F-test it describes.
TEST(SignificanceTest, RepeatsForPowerMatchesASimulation) {
  EXPECT_EQ(RepeatsForPower80(1.0), -1);
  const int64_t n4 = RepeatsForPower80(4.0);
  EXPECT_EQ(RepeatsForPower80(0.25), n4);  // either direction
  EXPECT_LT(RepeatsForPower80(10.0), n4);
  EXPECT_GT(RepeatsForPower80(2.0), n4);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z(0, 1);
  auto power = [&](int64_t n) {
    int rejected = 0;
    const int trials = 4000;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> a(n), b(n);
      for (auto& x : a) x = 2.0 * z(rng);  // variance 4
      for (auto& x : b) x = z(rng);
      if (FTestP(a, b) < 0.05) ++rejected;
    }
    return static_cast<double>(rejected) / trials;
  };
  EXPECT_NEAR(power(n4), 0.8, 0.04) << "n = " << n4;
  EXPECT_LT(power(n4 - 3), 0.8);
}

}  // namespace
}  // namespace strata
