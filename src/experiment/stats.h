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
