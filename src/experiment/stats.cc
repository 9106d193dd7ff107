#include "experiment/stats.h"

#include <algorithm>
#include <cmath>

namespace strata {

double Mean(const std::vector<double>& xs) {
  if (xs.empty()) return kNaN;
  double sum = 0;
  for (double x : xs) sum += x;
  return sum / static_cast<double>(xs.size());
}

double UnbiasedVariance(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double m = Mean(xs);
  double ss = 0, comp = 0;
  for (double x : xs) {
    ss += (x - m) * (x - m);
    comp += x - m;
  }
  // Corrected two-pass formula: the second term removes the rounding error
  // of the mean.
  const double n = static_cast<double>(xs.size());
  return (ss - comp * comp / n) / (n - 1);
}

double VarianceRatio(double baseline_var, double var) {
  if (std::isnan(baseline_var) || std::isnan(var) || var == 0) return kNaN;
  return baseline_var / var;
}

SampleStats Describe(const std::vector<double>& xs) {
  SampleStats s;
  s.n = static_cast<int64_t>(xs.size());
  s.mean = Mean(xs);
  s.variance = UnbiasedVariance(xs);
  if (!xs.empty()) {
    s.min = *std::min_element(xs.begin(), xs.end());
    s.max = *std::max_element(xs.begin(), xs.end());
  }
  return s;
}

namespace {
// Quantile p in [0, 1] of sorted `xs`, linear between order statistics.
double SortedQuantile(const std::vector<double>& xs, double p) {
  const double h = p * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (h - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}
}  // namespace

FiveNumbers Quartiles(std::vector<double> xs) {
  FiveNumbers f;
  if (xs.empty()) return f;
  std::sort(xs.begin(), xs.end());
  f.min = xs.front();
  f.q1 = SortedQuantile(xs, 0.25);
  f.median = SortedQuantile(xs, 0.5);
  f.q3 = SortedQuantile(xs, 0.75);
  f.max = xs.back();
  return f;
}

double Interpolate(const std::vector<double>& xs, const std::vector<double>& ys,
                   double x) {
  if (xs.empty() || xs.size() != ys.size()) return kNaN;
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  auto it = std::upper_bound(xs.begin(), xs.end(), x);
  const size_t i = static_cast<size_t>(it - xs.begin());
  const double x0 = xs[i - 1], x1 = xs[i];
  if (x1 == x0) return ys[i];
  return ys[i - 1] + (x - x0) / (x1 - x0) * (ys[i] - ys[i - 1]);
}

}  // namespace strata
