#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace strata {

// Descriptive statistics for repeated runs: pure functions, no state,
// thread-safe. Undefined quantities (the variance of one value, a ratio over
// zero) are NaN, never a made-up number; callers print them as "-" and write
// them as JSON null.

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Arithmetic mean; NaN for an empty sample.
double Mean(const std::vector<double>& xs);

// Unbiased sample variance, sum((x - mean)^2) / (n - 1), as in paper 001's
// tables; NaN when n < 2. Two-pass for accuracy.
double UnbiasedVariance(const std::vector<double>& xs);

// Paper 001's "N X less variance than the baseline": baseline_var / var.
// > 1 means the cell varies less than the baseline. NaN when either is NaN
// or var is 0 (an undefined ratio, not infinity).
double VarianceRatio(double baseline_var, double var);

// Mean and unbiased variance of one metric over a cell's runs.
struct SampleStats {
  int64_t n = 0;
  double mean = kNaN;
  double variance = kNaN;
  double min = kNaN;
  double max = kNaN;
};
SampleStats Describe(const std::vector<double>& xs);

// Five-number summary for a box plot: min, first quartile, median, third
// quartile, max. Quartiles interpolate linearly between order statistics
// (numpy's default, "type 7"). All NaN for an empty sample.
struct FiveNumbers {
  double min = kNaN, q1 = kNaN, median = kNaN, q3 = kNaN, max = kNaN;
};
FiveNumbers Quartiles(std::vector<double> xs);

// The value of the piecewise-linear curve through (xs[i], ys[i]) at `x`
// (xs ascending). Outside [xs.front(), xs.back()] the end value is held.
// NaN for an empty curve.
double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys,
                   double x);

}  // namespace strata

namespace strata {

// Distributions and tests for comparing cells (docs/design/experiments.md,
// "Significance"). Pure functions; NaN for undefined input.

// The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1
// (a continued fraction, to about 1e-12).
double IncompleteBeta(double a, double b, double x);
// P(T <= t) for Student's t with `df` degrees of freedom.
double StudentTCdf(double t, double df);
// The t with P(T <= t) = p (0 < p < 1).
double StudentTQuantile(double p, double df);
// P(F <= f) for Fisher's F(d1, d2).
double FCdf(double f, double d1, double d2);
// The f with P(F <= f) = p.
double FQuantile(double p, double d1, double d2);

// Half the width of the 95% confidence interval of the mean of `xs`
// (Student's t); NaN for fewer than 2 values.
double MeanCi95(const std::vector<double>& xs);

// Two-sided F-test of equal variances: p for var(a) / var(b). NaN when
// either has fewer than 2 values or a variance is 0.
double FTestP(const std::vector<double>& a, const std::vector<double>& b);
// The Brown-Forsythe test (Levene's, about the medians) of equal variances,
// robust to non-normal data: p. NaN when either has fewer than 3 values
// (with 2, both deviations from the median are equal: no spread within a
// group to compare with) or the deviations do not vary within the groups.
double BrownForsytheP(const std::vector<double>& a,
                      const std::vector<double>& b);
// Repeats per cell that a two-sided F-test at level 0.05 needs to detect a
// true variance ratio `ratio` (> 0, != 1) with probability 0.8; -1 when
// the ratio is undefined or 1, and `cap` + 1 beyond `cap`.
int64_t RepeatsForPower80(double ratio, int64_t cap = 1000);

}  // namespace strata
